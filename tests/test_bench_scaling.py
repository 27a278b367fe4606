"""``python -m ring_strategy.bench.scaling`` and its model
(ring_strategy/bench/alpha_beta.py): the fit recovers known latencies and
bandwidths, and the CLI measures every configuration in one job. The
delayed-network measurement itself: tests/multihost/test_scaling.py."""

import json
import sys

import pytest

from ring_strategy.bench import alpha_beta


def test_terms_count_only_what_crosses_hosts():
    # Two steps of negotiation, then the algorithm's own.
    assert alpha_beta.terms("ring", 8, 2) == (16.0, 1.75)
    assert alpha_beta.terms("doubling", 8, 2) == (4.0, 2.0)  # 4 hosts: 2 levels cross
    assert alpha_beta.terms("halving-doubling", 8, 2) == (6.0, 2 * (1 / 2 - 1 / 8))
    assert alpha_beta.terms("hierarchical+ring", 8, 2) == (8.0, 1.5 / 2)
    assert alpha_beta.terms("ring", 4, 4) == (0.0, 0.0)  # one host: nothing crosses
    with pytest.raises(ValueError):
        alpha_beta.terms("ring", 6, 4)


def test_fit_recovers_the_model_it_was_made_from():
    alpha, beta = 5e-4, 2e-9
    points = [(a, n, p, m, alpha_beta.predict(alpha, beta, a, n, p, m))
              for a in ("ring", "doubling", "halving-doubling", "hierarchical+ring")
              for n, p in ((8, 2), (16, 1)) for m in (4, 65536, 1 << 20)]
    got_alpha, got_beta, errors = alpha_beta.fit(points)
    assert got_alpha == pytest.approx(alpha, rel=1e-6) and got_beta == pytest.approx(beta, rel=1e-6)
    assert max(abs(e) for e in errors) < 1e-6


def test_cli_measures_every_configuration_in_one_job(ringrun, tmp_path):
    out = tmp_path / "scaling.json"
    proc = ringrun(2, [sys.executable, "-m", "ring_strategy.bench.scaling", "--configs", "ring,doubling,auto",
                       "--sizes", "4,64K", "--iters", "3", "--warmup", "1", "--json", str(out)], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [report] = json.loads(out.read_text())
    assert report["ranks"] == 2 and report["sizes"] == [4, 65536]
    assert set(report["times_s"]) == {"ring", "doubling", "auto"}
    assert all(t > 0 for times in report["times_s"].values() for t in times)
    assert "no fit: one host" in proc.stdout


def test_cli_refuses_an_unknown_configuration(capsys):
    from ring_strategy.bench import scaling

    with pytest.raises(SystemExit) as e:
        scaling.main(["--configs", "ring,fastest"])
    assert e.value.code == 2 and "fastest" in capsys.readouterr().err
