"""pyfuser.rng, the definition of pyfuser's random numbers: Philox-4x32-10 against the
Random123 known-answer vectors, and the element <-> (subsequence, word) layout."""
from __future__ import annotations

import pytest
import torch

from pyfuser.rng import philox, random_words, reference_random

# (counter words, key words, expected output words), from Random123's kat_vectors.
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


@pytest.mark.parametrize("ctr,key,want", KAT, ids=["zeros", "ones", "pi"])
def test_philox_known_answers(ctr, key, want):
    seed = key[0] | (key[1] << 32)
    words = philox(seed, torch.tensor([ctr[0]], dtype=torch.int64), ctr[1], ctr[2], ctr[3])
    assert [int(w.item()) for w in words] == want


def test_element_i_takes_word_i_mod_4_of_subsequence_i_div_4():
    seed, offset = 99, 8
    flat, _ = random_words(10, seed, offset, "cpu")
    for i in range(10):
        words = philox(seed, torch.tensor([i // 4], dtype=torch.int64), 0, offset, 0)
        assert int(flat[i]) == int(words[i % 4].item())


def test_values_do_not_depend_on_the_shape_only_on_the_linear_index():
    a = reference_random("uniform", (6, 5), 0.0, 1.0, 7, 0, torch.float32, "cpu")
    b = reference_random("uniform", (30,), 0.0, 1.0, 7, 0, torch.float32, "cpu")
    c = reference_random("uniform", (31,), 0.0, 1.0, 7, 0, torch.float32, "cpu")
    assert torch.equal(a.flatten(), b) and torch.equal(b, c[:30])


def test_uniform_range_and_normal_moments():
    u = reference_random("uniform", (20000,), 0.0, 1.0, 1, 0, torch.float32, "cpu")
    assert 0.0 <= u.min().item() and u.max().item() < 1.0 and abs(u.mean().item() - 0.5) < 0.01
    n = reference_random("normal", (20000,), 2.0, 3.0, 1, 0, torch.float32, "cpu")
    assert abs(n.mean().item() - 2.0) < 0.1 and abs(n.std().item() - 3.0) < 0.1
