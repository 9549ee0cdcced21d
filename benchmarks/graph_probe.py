"""Print the ATen nodes around every sum of a tiny BERT's backward as the backend sees
them (after padding, before the rewrites): what a rewrite must match on this torch."""
import torch

import pyfuser.dynamo.backend as be
from pyfuser.dynamo import bert_bench as bb
from pyfuser.dynamo import one_hot

orig = be._rewritten


def spy(gm):
    for n in gm.graph.nodes:
        if n.op == "call_function" and "sum" in str(n.target):
            print("SUM", n.format_node())
            todo, seen = [(n, 0)], set()
            while todo:
                m, d = todo.pop()
                for a in m.all_input_nodes:
                    if a in seen or d > 4:
                        continue
                    seen.add(a)
                    v = a.meta.get("val")
                    print("   " * (d + 1), a.format_node(), tuple(v.shape) if hasattr(v, "shape") else "")
                    todo.append((a, d + 1))
            print("   matched:", one_hot._one_hot_sum(n) is not None)
    return orig(gm)


be._rewritten = spy
cfg = dict(num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=500,
           max_position_embeddings=64)
bb.run_bert_benchmark(4, 16, steps=1, device="cuda" if torch.cuda.is_available() else "cpu", warmup=1,
                      implementations=("pyfuser",), config_overrides=cfg)
