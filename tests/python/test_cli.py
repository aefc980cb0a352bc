"""horovodrun command lines from Horovod's docs, pasted unchanged (python
instead of a script name where the docs run `python train.py`)."""

import os

import pytest

from launcher import PYTHON, rank_lines, run

PROGRAM = ("import hvactor.torch as hvd, os; hvd.init(); "
           "print('RANK', hvd.rank(), hvd.size(), os.environ.get('HVACTOR_TEST_FORWARDED'), "
           "flush=True)")


@pytest.mark.parametrize("flags", [
    ["-np", "2"],
    ["--num-proc", "2"],
    ["-np", "2", "--gloo"],
    ["-np", "2", "-H", "localhost:2"],
    ["-np", "2", "--log-level", "WARNING", "--log-without-timestamp"],
    ["-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "3.5"],
    ["-np", "2", "--cache-capacity", "2048", "--hierarchical-allreduce"],
])
def test_horovodrun_lines_run_without_dashes(flags):
    p = run(flags + [PYTHON, "-c", PROGRAM], env={"HVACTOR_TEST_FORWARDED": "yes"})
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(rank_lines(p.stdout, "RANK"))
    assert lines == ["RANK 0 2 yes", "RANK 1 2 yes"], p.stdout + p.stderr


def test_program_options_are_the_programs():
    # -np after the program belongs to the program, as with horovodrun.
    p = run(["-np", "2", PYTHON, "-c", "import sys; print('ARGS', sys.argv[1:])", "-np", "7"])
    assert p.returncode == 0, p.stderr
    assert rank_lines(p.stdout, "ARGS") == ["ARGS ['-np', '7']"] * 2


def test_mpi_flag_warns_and_runs():
    p = run(["-np", "2", "--mpi", PYTHON, "-c", PROGRAM])
    assert p.returncode == 0, p.stderr
    assert "no MPI controller" in p.stderr
    assert len(rank_lines(p.stdout, "RANK")) == 2


def test_gloo_and_mpi_together_are_refused():
    p = run(["-np", "2", "--gloo", "--mpi", PYTHON, "-c", "pass"])
    assert p.returncode == 2 and "mutually exclusive" in p.stderr


def test_prefix_timestamp_and_output_filename(tmp_path):
    out = tmp_path / "logs"
    p = run(["-np", "2", "-prefix-timestamp", "--output-filename", str(out), PYTHON, "-c",
             "print('HELLO', flush=True)"])
    assert p.returncode == 0, p.stderr
    hello = [line for line in p.stdout.splitlines() if "HELLO" in line]
    assert len(hello) == 2 and all(line[:4].isdigit() for line in hello)  # a date first
    assert sorted(os.listdir(out)) == ["rank.0", "rank.1"]
    assert (out / "rank.0" / "stdout").read_text().strip() == "HELLO"


def test_output_filename_pads_ranks_as_horovodrun(tmp_path):
    out = tmp_path / "logs"
    p = run(["-np", "11", "--output-filename", str(out), "sh", "-c", "echo x"], timeout=300)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(out))[:3] == ["rank.00", "rank.01", "rank.02"]
    assert "rank.10" in os.listdir(out)


def test_slots_per_host_needs_discovery():
    p = run(["-np", "2", "--slots-per-host", "2", "true"])
    assert p.returncode == 2 and "--host-discovery-script" in p.stderr


def test_no_program():
    p = run(["-np", "2"])
    assert p.returncode == 2 and "no program" in p.stderr
