"""Dump the segmented fusions of a 1-layer BERT trained one step through the backend
on this machine (fusion numbers follow translation order, as in the full model's
kernel names ``pyfuser_f<N>_k<M>``): ``python benchmarks/bert_fusions.py [N ...]``
prints fusions N (all without arguments); ``--full`` dumps bert-base at 64 x 128 instead
(the numbers are then the benchmark's own)."""
import contextlib
import io
import os
import re
import sys

import torch

from pyfuser.bench import bert_bench as bb

os.environ["PYFUSER_DUMP"] = "segmented_fusion"
cfg = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=500,
           max_position_embeddings=64)
full = "--full" in sys.argv
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    bb.run_bert_benchmark(*((64, 128) if full else (4, 16)), steps=1, warmup=1,
                          device="cuda" if torch.cuda.is_available() else "cpu",
                          implementations=("pyfuser",), config_overrides=None if full else cfg)
want = set(sys.argv[1:]) - {"--full"}
for block in re.split(r"(?m)^(?=Segmented fusion)", buf.getvalue()):
    m = re.match(r"Segmented fusion(\d+):", block)
    if m and (not want or m.group(1) in want):
        print(block.rstrip())
