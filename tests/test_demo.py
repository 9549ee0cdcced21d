"""``python -m pyfuser.demo`` runs the four seed fusions and checks them (small sizes on CPU)."""
from pyfuser import demo


def test_demo_passes_on_small_sizes(capsys):
    assert demo.main(["--small", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("def nvfuser_fusion(") == 4
    assert "4 of 4 fusions PASS" in out and "FAIL" not in out
