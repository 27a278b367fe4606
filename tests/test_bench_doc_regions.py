"""make bench's doc rewriting (ring_strategy.bench.doc_regions, standard.region_text) with canned rows: no jobs run."""

from __future__ import annotations

import pytest

from ring_strategy.bench.doc_regions import case_table, replace_regions, sizes_table, train_table
from ring_strategy.bench.standard import plot_rows, region_text, standard_jobs

DOC = """# Title

Prose before, with trailing spaces   
<!-- bench:machine begin -->
old machine line
<!-- bench:machine end -->

## Section

<!-- bench:allreduce-2 begin -->
| old | table |
<!-- bench:allreduce-2 end -->
Prose after, no final newline"""

SIZE_ROWS = [
    {"op": "allreduce", "size_bytes": 4, "count": 1, "dtype": "float32", "redop": "sum", "ranks": 2, "iters": 20,
     "time_us": 12.5, "algbw_gbps": 0.00032, "busbw_gbps": 0.00032, "wrong": 0, "mem_limit_busbw_gbps": 8.0,
     "mem_percent": 0.004, "peer": "mpi", "peer_time_us": 5.0, "peer_algbw_gbps": 0.0008,
     "peer_busbw_gbps": 0.0008, "peer_wrong": 0, "ratio": 0.4},
    {"op": "allreduce", "size_bytes": 64 << 20, "count": 16 << 20, "dtype": "float32", "redop": "sum", "ranks": 2,
     "iters": 20, "time_us": 9500.0, "algbw_gbps": 7.06, "busbw_gbps": 7.06, "wrong": 0,
     "mem_limit_busbw_gbps": 8.0, "mem_percent": 88.3, "peer": "mpi", "peer_time_us": 45000.0,
     "peer_algbw_gbps": 1.49, "peer_busbw_gbps": 1.49, "peer_wrong": 0, "ratio": 4.74},
]


def _parts(text: str, name: str):
    begin, end = f"<!-- bench:{name} begin -->\n", f"<!-- bench:{name} end -->"
    head, rest = text.split(begin)
    body, tail = rest.split(end)
    return head, body, tail


def test_markers_are_replaced_and_everything_else_is_byte_identical():
    job = next(j for j in standard_jobs() if j.region == "allreduce-2")
    table = region_text(job, SIZE_ROWS, None)
    new = replace_regions(DOC, {"machine": "new machine line", "allreduce-2": table})
    head, body, tail = _parts(new, "allreduce-2")
    old_head, _, old_tail = _parts(DOC, "allreduce-2")
    assert tail == old_tail and tail.endswith("no final newline")
    assert head == old_head.replace("old machine line\n", "new machine line\n")
    assert body == table
    assert body.startswith("`mpirun ") and "--compare mpi" in body and "--json" not in body
    assert "| 64M | 9500.0 | 7.06 | 88% | 45000 | 1.49 | 4.74x |" in body
    assert replace_regions(new, {"machine": "new machine line\n", "allreduce-2": table}) == new  # idempotent


@pytest.mark.parametrize("doc", [DOC.replace("<!-- bench:allreduce-2 end -->\n", ""),
                                 DOC.replace("<!-- bench:allreduce-2 begin -->", "<!-- bench:allreduce-2 begun -->"),
                                 DOC + "\n<!-- bench:allreduce-2 end -->\n"])
def test_a_missing_or_repeated_marker_is_a_clear_error(doc):
    with pytest.raises(ValueError, match=r"region 'allreduce-2': expected the line '<!-- bench:allreduce-2"):
        replace_regions(doc, {"allreduce-2": "x"})


def test_markers_out_of_order_are_an_error():
    doc = "<!-- bench:a end -->\n<!-- bench:a begin -->\n"
    with pytest.raises(ValueError, match="own line before"):
        replace_regions(doc, {"a": "x"})


def test_case_train_tables_and_skipped_jobs():
    case = [{"op": "small-tensors", "time_us": 3230.0, "peer": "mpi", "peer_time_us": 2960.0, "ratio": 0.916}]
    assert case_table(case)[2:] == ["| ring | 3230.0 | 1.00x |", "| mpi | 2960.0 | 0.92x |"]
    train = [{"framework": "ring", "ranks": 2, "samples_per_s": 1700.0, "efficiency": 0.7, "np1_samples_per_s": 1200.0},
             {"framework": "none", "ranks": 2, "samples_per_s": 2000.0, "efficiency": 0.875, "np1_samples_per_s": 1200.0}]
    assert train_table(train)[2:] == ["| np=1, no communication | 1200.0 | - |", "| np=2, ring | 1700.0 | 70.0% |",
                                      "| np=2, no communication | 2000.0 | 87.5% |"]
    netns = next(j for j in standard_jobs() if j.region == "netns-2")
    assert region_text(netns, None, "network namespaces need root").endswith(
        "\nNot measured in this run: network namespaces need root\n")
    assert sizes_table(SIZE_ROWS)[0].startswith("| size | ring time (us) | ring busbw (GB/s) | %mem | mpi time")


def test_plot_rows_rebuild_the_measurements():
    rows = plot_rows(SIZE_ROWS)
    assert [r.size_bytes for r in rows] == [4, 64 << 20]
    assert [m.backend for m in rows[1].results] == ["ring", "mpi"]
    assert rows[1].busbw(rows[1].peers[0]) == pytest.approx(1.49, rel=1e-2)
