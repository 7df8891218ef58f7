import json

import pytest

from tests._cli import run
from tests._shards import write_small_shards


def _one_line_error(res):
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.output


def test_learn_writes_outputs_and_report(tmp_path, shards):
    out = tmp_path / "run"
    res = run("learn", shards, "--out", out, "--rounds", 30, "--json", "--seed", 1)
    assert res.exit_code == 0, res.output
    for name in ("adjacency.csv", "edges.csv", "graph.dot", "report.json"):
        assert (out / name).is_file()
    rep = json.loads((out / "report.json").read_text())
    assert json.loads(res.stdout) == rep
    assert rep["method"] == "fed-sparse"
    for key in ("bytes_up", "bytes_down", "bytes_total"):
        assert rep["communication"][key] > 0
    assert rep["timing"]["wall_s"] > 0 and rep["rounds"] <= 30
    assert "i -> j" in rep["orientation"]
    assert "W[i, j]" in (out / "graph.dot").read_text()


def test_without_out_the_edge_list_goes_to_stdout(shards):
    res = run("learn", str(shards / "*.csv"), "--quiet")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "source,target,weight"
    assert res.stderr == ""


def test_files_from_and_duplicates(tmp_path):
    shards = write_small_shards(tmp_path / "small")  # the file list is under test, not the learning
    lst = tmp_path / "list.txt"
    files = sorted(shards.glob("*.csv"))
    lst.write_text("\n".join(str(p) for p in files + files[:1]) + "\n")
    res = run("learn", "--files-from", lst, "--method", "notears", "--json", "-q")
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["data"]["participants"]) == len(files)


@pytest.mark.parametrize(
    "content, needle",
    [("x01,x02\n1,2\n3,oops\n", "oops"), ("x01,x02\n1,2\n", "row"), ("", "empty")],
)
def test_bad_shard_exits_3_without_output(tmp_path, shards, content, needle):
    bad = shards / "participant-05.csv"
    bad.write_text(content)
    out = tmp_path / "run"
    res = run("learn", shards, "--out", out)
    assert res.exit_code == 3
    _one_line_error(res)
    assert "participant-05.csv" in res.stderr and needle in res.stderr
    assert not out.exists()


def test_shards_with_different_columns_exit_3(tmp_path, shards):
    text = (shards / "participant-01.csv").read_text().replace("x1,", "other,", 1)
    (shards / "participant-01.csv").write_text(text)
    res = run("learn", shards)
    assert res.exit_code == 3
    _one_line_error(res)
    assert "columns differ" in res.stderr


def test_refuses_to_overwrite_foreign_files(tmp_path, shards):
    out = tmp_path / "run"
    out.mkdir()
    (out / "edges.csv").write_text("precious\n")
    res = run("learn", shards, "--out", out, "-q", "--rounds", 5)
    assert res.exit_code == 2 and "--force" in res.stderr
    assert (out / "edges.csv").read_text() == "precious\n"
    assert run("learn", shards, "--out", out, "-q", "--rounds", 5, "--force").exit_code == 0
    # a bnsl output directory may be re-used without --force
    assert run("learn", shards, "--out", out, "-q", "--rounds", 5).exit_code == 0


@pytest.mark.parametrize(
    "args, code",
    [
        (["--dp"], 2),
        (["--epsilon", "5"], 2),
        (["--dp", "--epsilon", "-1"], 5),
        (["--dp", "--epsilon", "5", "--delta", "2"], 5),
        (["--dp", "--epsilon", "5", "--method", "notears"], 2),
        (["--method", "nope"], 2),
        (["--snap", "-0.1"], 2),
        (["-m", "fed-sparse", "--dp", "--epsilon", "5", "--polish-share", "0"], 5),
        (["-m", "fed-sparse", "--dp", "--epsilon", "5", "--polish-share", "1"], 5),
        (["-m", "fed-sparse", "--dp", "--epsilon", "5", "--polish-share", "-0.1", "--no-polish"], 5),
    ],
)
def test_option_errors(shards, args, code):
    res = run("learn", shards, *args)
    assert res.exit_code == code, res.output
    _one_line_error(res)


def test_dp_run_reports_privacy_and_warns_about_the_seed(tmp_path, shards):
    out = tmp_path / "dp"
    res = run("learn", shards, "-m", "fed-sparse", "--dp", "--epsilon", 8, "--seed", 3, "--rounds", 5, "--out", out)
    assert res.exit_code == 0, res.output
    assert "warning" in res.stderr and "seed" in res.stderr
    pv = json.loads((out / "report.json").read_text())["privacy"]
    assert pv["epsilon"] <= 8 + 1e-9 and pv["delta"] == pytest.approx(1e-6)
    assert pv["neighbouring_relation"].startswith("replace-one")


def test_no_polish_is_recorded_in_the_report(shards):
    res = run("learn", shards, "--no-polish", "--json", "-q", "--rounds", 5)
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["polish"] == {"applied": False, "reason": "--no-polish"} and rep["options"]["polish"] is False
    res = run("learn", shards, "--json", "-q", "--rounds", 5)
    rep = json.loads(res.stdout)
    assert rep["polish"]["applied"] and rep["communication"]["polish"]["bytes_up"] > 0


def test_local_notears_writes_one_graph_per_participant(tmp_path):
    shards = write_small_shards(tmp_path / "small")  # local-notears on examples/tiny takes seconds
    out = tmp_path / "local"
    res = run("learn", shards, "--method", "local-notears", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.glob("participant-*")) == [f"participant-0{k}" for k in range(1, 5)]
    assert (out / "participant-02" / "adjacency.csv").is_file()
    for k in range(1, 5):  # the same files for every participant, and no pooled graph
        assert sorted(p.name for p in (out / f"participant-0{k}").iterdir()) == [
            "adjacency.csv", "cpdag.csv", "edges.csv", "graph.dot"]
    assert (out / "report.json").is_file() and not (out / "adjacency.csv").exists()
