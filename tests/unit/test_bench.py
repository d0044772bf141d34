"""tfdist bench: config validation, planning, commands, statistics, diagnosis and report files
(pure parts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import cli
from tfdist.bench.config import BenchConfig, WorkerSpec, parse_backends, parse_compare, parse_counts
from tfdist.bench.diagnose import Evidence, diagnose
from tfdist.bench.plan import RunSpec, command_for, plan_bench, program_for, worker_args
from tfdist.bench.preflight import preflight
from tfdist.bench.report import write_all
from tfdist.bench.runner import Usage, read_results
from tfdist.bench.stats import (
    Sample,
    combine_copies,
    common_window,
    measured_window,
    percentile,
    sample_from_summary,
    summarize,
)
from tfdist.errors import ConfigError


def config(tmp_path: Path, **kw: object) -> BenchConfig:
    return BenchConfig(out=str(tmp_path / "out"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("0", "not a positive integer"),
        ("1,x", "'x'"),
        ("2,2", "repeats"),
        ("-1", "not a positive"),
    ],
)
def test_bad_count_lists(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_counts(text, "--workers")


def test_counts_are_sorted() -> None:
    assert parse_counts("4, 1,2", "--workers") == (1, 2, 4)


@pytest.mark.parametrize("text", ["", "horovod", "tf,tf", "tf,nccl"])
def test_bad_backends(text: str) -> None:
    with pytest.raises(ConfigError, match="--backend"):
        parse_backends(text)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"steps": 0}, "--steps"),
        ({"warmup": -1}, "--warmup"),
        ({"warmup": 0, "steps": 1}, "never timed"),
        ({"repeats": 0}, "--repeats"),
        ({"threads": 0}, "--threads"),
        ({"input_delay_ms": -5.0}, "--input-delay-ms"),
        ({"run_timeout": 0.0}, "--run-timeout"),
        ({"workload": "vgg"}, "--workload 'vgg' is unknown"),
        ({"dataset": "imagenet"}, "--dataset"),
        ({"batch_size_per_replica": 0}, "--batch-size-per-replica"),
    ],
)
def test_bad_config(tmp_path: Path, kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, **kw)


def test_existing_results_are_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text("{}")
    cfg = config(tmp_path)  # the config checks values; the machine is checked by preflight
    with pytest.raises(ConfigError, match=r"already holds results\.json"):
        preflight(cfg, plan_bench(cfg, cores=2, gpus=0))
    (tmp_path / "file").write_text("x")
    cfg = BenchConfig(out=str(tmp_path / "file"))
    with pytest.raises(ConfigError, match="is a file"):
        preflight(cfg, plan_bench(cfg, cores=2, gpus=0))


@pytest.mark.parametrize(
    ("steps", "warmup", "block"), [(50, 10, 10), (50, 5, 5), (30, 0, 10), (7, 3, 1), (20, 4, 2)]
)
def test_timing_blocks_end_at_the_warmup_boundary(
    tmp_path: Path, steps: int, warmup: int, block: int
) -> None:
    cfg = config(tmp_path, steps=steps, warmup=warmup)
    assert cfg.log_every == block
    assert warmup % block == 0 and steps % block == 0


def test_plan_shares_the_single_worker_run_and_skips_mpi_multi_replica(tmp_path: Path) -> None:
    plan = plan_bench(
        config(tmp_path, workers=(1, 2), replicas=(1, 2), backends=("tf", "mpi")), cores=4, gpus=0
    )
    assert [r.name for r in plan.runs] == ["local-w1-r1", "local-w1-r2", "tf-w2-r1", "mpi-w2-r1", "tf-w2-r2"]
    assert any("one replica per rank" in s for s in plan.skipped)
    assert plan.threads == 2
    assert any("logical CPU devices" in w for w in plan.warnings)


def test_oversubscription_warnings(tmp_path: Path) -> None:
    cpu = plan_bench(config(tmp_path, workers=(1, 4)), cores=2, gpus=0)
    assert cpu.threads == 1 and any("4 workers x 1 thread(s) > 2 CPU cores" in w for w in cpu.warnings)
    gpu = plan_bench(config(tmp_path, workers=(1, 4)), cores=16, gpus=2)
    assert any("more GPUs than the 2 visible" in w for w in gpu.warnings)
    fine = plan_bench(config(tmp_path, workers=(1, 2)), cores=2, gpus=0)
    assert fine.warnings == ()


def test_order_alternates_and_keeps_every_run(tmp_path: Path) -> None:
    plan = plan_bench(config(tmp_path, workers=(1, 2, 4), backends=("tf", "mpi")), cores=8, gpus=0)
    orders = [plan.order(r) for r in range(3)]
    assert all(sorted(o, key=str) == sorted(plan.runs, key=str) for o in orders)
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0][0] != orders[1][0]


def test_commands(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    program = worker_args(cfg, "/r")
    kw = {"python": "py", "threads": 1, "run_dir": "/r", "log_path": "/l", "timeout": 60.0}
    local = command_for(RunSpec(1, 2, "local"), program, gpus=0, **kw)  # type: ignore[arg-type]
    assert local.argv[:4] == ("py", "-u", "-m", "tfdist.bench.worker")
    assert local.env["TFDIST_CPU_REPLICAS"] == "2" and local.env["TF_NUM_INTRAOP_THREADS"] == "1"
    tf = command_for(RunSpec(2, 1, "tf"), program, gpus=0, **kw)  # type: ignore[arg-type]
    assert (
        tf.argv[1:6] == ("-m", "tfdist", "launch", "-n", "2") and "--cpu" in tf.argv and "mpi" not in tf.argv
    )
    mpi = command_for(RunSpec(2, 1, "mpi"), program, gpus=0, **kw)  # type: ignore[arg-type]
    assert mpi.argv[mpi.argv.index("--backend") + 1] == "mpi"
    gpu = command_for(RunSpec(1, 2, "local"), program, gpus=4, **kw)  # type: ignore[arg-type]
    assert gpu.env["CUDA_VISIBLE_DEVICES"] == "0,1" and "TFDIST_CPU_REPLICAS" not in gpu.env
    spec = WorkerSpec.from_json(program[-1])  # the worker's whole config: one JSON argument
    assert spec == WorkerSpec.of(cfg, "/r") and spec.log_every == 10 and spec.mode == "train"


def test_step_times_exclude_the_warmup() -> None:
    timeline = [(10, 101.0), (20, 102.0), (30, 103.5), (40, 104.5)]
    assert measured_window(timeline, 100.0, 10) == [(10, 101.0), (20, 102.0), (30, 103.5), (40, 104.5)]
    assert measured_window(timeline, 100.0, 20)[0] == (20, 102.0)
    assert measured_window(timeline, 100.0, 0)[0] == (1, 100.0)  # the first step (tracing) is never timed
    summary = {"timeline": timeline, "first_step_at": 100.0, "global_batch": 64}
    s = sample_from_summary(summary, 10, started_at=97.0)
    assert s.step_times_s == pytest.approx((0.1, 0.15, 0.1))
    assert s.examples_per_sec == pytest.approx(30 * 64 / 3.5)
    assert s.time_to_first_step_s == pytest.approx(3.0)
    assert s.window == (101.0, 104.5)
    with pytest.raises(ValueError, match="more --steps"):
        sample_from_summary(summary, 40, started_at=97.0)


def test_percentile() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)
    assert percentile([7.0], 90) == 7.0


def _sample(rate: float) -> Sample:
    return Sample((0.1, 0.2), rate, 3.0, (0.0, 1.0), 0.5)


def test_speedup_and_efficiency_against_the_smallest_configuration() -> None:
    rows = summarize(
        {
            RunSpec(1, 1, "local"): [_sample(100.0), _sample(110.0), _sample(90.0)],
            RunSpec(2, 1, "tf"): [_sample(150.0)],
            RunSpec(2, 1, "mpi"): [_sample(190.0)],
            RunSpec(2, 2, "tf"): [_sample(300.0)],
        }
    )
    by = {r["name"]: r for r in rows}
    assert by["local-w1-r1"]["baseline"] and by["local-w1-r1"]["speedup"] == 1.0
    assert by["tf-w2-r1"]["speedup"] == pytest.approx(1.5) and by["tf-w2-r1"]["efficiency"] == pytest.approx(
        0.75
    )
    assert by["mpi-w2-r1"]["efficiency"] == pytest.approx(0.95)
    assert by["tf-w2-r2"]["efficiency"] == pytest.approx(0.75)  # 3x on 4 replicas
    assert by["local-w1-r1"]["step_time_p90_s"] == pytest.approx(0.2)
    assert by["local-w1-r1"]["repeats"] == 3


def _evidence(**kw: object) -> Evidence:
    base: dict[str, object] = {
        "workers": 2,
        "replicas": 1,
        "batch_per_replica": 64,
        "cores": 2,
        "gpus": 0,
        "threads": 1,
        "input_eps": 50_000.0,
        "compute_eps": 1_000.0,
        "gradient_mb": 4.8,
        "allreduce_s": {"tf": 0.012, "mpi": 0.003},
        "full_eps": {"tf": 1_500.0, "mpi": 1_950.0},
        "single_eps": 1_000.0,
    }
    base.update(kw)
    return Evidence(**base)  # type: ignore[arg-type]


def test_diagnosis_names_each_bottleneck() -> None:
    assert diagnose(_evidence()).bottleneck == "compute"  # mpi: 0.975 efficiency
    slow_input = diagnose(_evidence(input_eps=400.0))
    assert slow_input.bottleneck == "input" and "num_parallel_calls" in slow_input.recommendation
    comm = diagnose(
        _evidence(
            compute_eps=8_000.0,
            single_eps=8_000.0,
            full_eps={"tf": 1_800.0},
            allreduce_s={"tf": 0.038, "mpi": 0.012},
        )
    )
    assert comm.bottleneck == "communication" and comm.backend == "tf"
    assert "--backend mpi" in comm.recommendation
    assert any("38.0 ms" in line for line in comm.evidence)
    over = diagnose(_evidence(workers=4, threads=1, cores=2))
    assert over.bottleneck == "oversubscription" and "--workers 2" in over.recommendation
    gpu_over = diagnose(_evidence(gpus=1))
    assert gpu_over.bottleneck == "oversubscription"
    lagging = diagnose(_evidence(full_eps={"tf": 1_500.0}, allreduce_s={"tf": 0.012}))  # 0.75: sync overhead
    assert lagging.bottleneck == "communication"


def test_cpu_utilisation_is_interpolated_over_the_window() -> None:
    usage = Usage(cpu=[(0.0, 0.0), (1.0, 1.0), (2.0, 3.0)])
    assert usage.cpu_util(0.5, 1.5, cores=2) == pytest.approx((2.0 - 0.5) / 2)
    assert Usage().cpu_util(0.0, 1.0, cores=2) is None
    assert Usage().gpu(0.0, 1.0) == (None, None)


def test_report_files(tmp_path: Path) -> None:
    rows = summarize({RunSpec(1, 1, "local"): [_sample(100.0)], RunSpec(2, 1, "tf"): [_sample(180.0)]})
    payload = {
        "settings": {
            "workload": "mnist-cnn",
            "dataset": "synthetic",
            "batch_size_per_replica": 64,
            "steps": 50,
            "warmup": 10,
            "repeats": 1,
            "log_every": 10,
            "threads": 1,
        },
        "machine": {"cores": 2, "gpus": 0},
        "runs": rows,
        "skipped": [],
        "warnings": ["a warning"],
        "diagnosis": {"bottleneck": "compute", "evidence": ["e1"], "recommendation": "r"},
    }
    paths = write_all(tmp_path, payload)
    assert [p.name for p in paths] == ["results.json", "results.csv", "report.md", "scaling.png"]
    runs = json.loads(paths[0].read_text())["runs"]
    assert {
        "workers",
        "replicas",
        "backend",
        "examples_per_sec",
        "step_time_median_s",
        "speedup",
        "efficiency",
    } <= set(runs[1])
    csv_lines = paths[1].read_text().splitlines()
    assert csv_lines[0].startswith("name,workers,replicas,backend") and len(csv_lines) == 3
    md = paths[2].read_text()
    assert "| tf-w2-r1 | 1 | 2 | 1 | tf | 180 |" in md  # nodes, workers, replicas, backend, examples/s
    assert "## Diagnosis: compute-bound" in md and "a warning" in md
    assert paths[3].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*tmp*"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0"], "--workers '0'"),
        (["--backend", "horovod"], "--backend 'horovod'"),
        (["--steps", "x"], "'x' is not an integer"),
        (["--workload", "vgg"], "--workload 'vgg'"),
        (["--compare", "raw"], "--compare 'raw': unknown raw"),
        (["--compare", "raw-tf", "--dataset", "tfds:mnist"], "reference programs train on in-memory"),
    ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    out = tmp_path / "bench-out"
    code, _, err = cli(capsys, "bench", "--out", str(out), *argv)
    assert code == 2
    err = err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", ("independent", "raw-tf", "keras-fit")),
        ("none", ()),
        ("raw-tf, Independent", ("raw-tf", "independent")),
    ],
)
def test_compare_lists(text: str, expected: tuple[str, ...]) -> None:
    assert parse_compare(text) == expected


@pytest.mark.parametrize("text", ["", "raw", "raw-tf,raw-tf", "tf"])
def test_bad_compare_lists(text: str) -> None:
    with pytest.raises(ConfigError, match="--compare"):
        parse_compare(text)


def test_references_run_beside_every_multi_worker_size(tmp_path: Path) -> None:
    config = BenchConfig(
        out=str(tmp_path),
        workers=(1, 2, 4),
        replicas=(1, 2),
        backends=("tf",),
        compare=("independent", "raw-tf"),
    )
    plan = plan_bench(config, cores=8, gpus=0)
    names = [r.name for r in plan.runs]
    assert "independent-w2-r1" in names and "raw-tf-w4-r1" in names
    assert not any(n.startswith(("independent-w1", "raw-tf-w1")) for n in names)  # one worker: local is it
    assert not any(n.startswith("independent") and n.endswith("r2") for n in names)
    assert any("raw-tf with 2 replicas" in s for s in plan.skipped)
    independent = program_for(RunSpec(2, 1, "independent"), config, "run")
    assert independent[:2] == ("-m", "tfdist.bench.worker")
    assert WorkerSpec.from_json(independent[2]).mode == "independent"
    raw = program_for(RunSpec(2, 1, "raw-tf"), config, "run")
    assert raw[:3] == ("-m", "tfdist.bench.references", "raw-tf")
    command = command_for(
        RunSpec(2, 1, "raw-tf"), raw, python="py", threads=1, gpus=0, run_dir="r", log_path="l", timeout=9
    )
    assert "launch" in command.argv and "--backend" not in command.argv  # MultiWorkerMirroredStrategy


def test_independent_copies_add_their_rates_over_their_common_window() -> None:
    a = Sample((0.1, 0.1), 600.0, 5.0, (10.0, 20.0))
    b = Sample((0.2,), 500.0, 6.0, (11.0, 21.0))
    both = combine_copies([a, b])
    assert both.examples_per_sec == 1100.0 and both.time_to_first_step_s == 6.0
    assert both.window == (11.0, 20.0) and sorted(both.step_times_s) == [0.1, 0.1, 0.2]
    apart = combine_copies([a, Sample((0.2,), 500.0, 6.0, (30.0, 40.0))])
    assert apart.window == (10.0, 40.0)


def test_rows_are_compared_with_the_references_of_their_size() -> None:
    rows = summarize(
        {
            RunSpec(1, 1, "local"): [Sample((0.1,), 100.0, 3.0, (0.0, 1.0), peak_rss_mb=500.0)],
            RunSpec(2, 1, "mpi"): [Sample((0.1,), 190.0, 3.0, (0.0, 1.0), peak_rss_mb=550.0)],
            RunSpec(2, 1, "independent"): [Sample((0.1,), 200.0, 3.0, (0.0, 1.0), peak_rss_mb=500.0)],
            RunSpec(2, 1, "raw-tf"): [Sample((0.1,), 125.0, 3.0, (0.0, 1.0))],
        }
    )
    by = {r["name"]: r for r in rows}
    assert by["mpi-w2-r1"]["vs_independent"] == pytest.approx(0.95)
    assert by["mpi-w2-r1"]["vs_raw_tf"] == pytest.approx(1.52)
    assert by["mpi-w2-r1"]["rss_vs_one_worker"] == pytest.approx(1.1)
    assert by["raw-tf-w2-r1"]["rss_vs_one_worker"] is None  # not sampled
    assert by["local-w1-r1"]["vs_independent"] is None  # no one-worker reference: local is the reference


def test_results_of_a_chief_or_of_independent_copies(tmp_path: Path) -> None:
    assert read_results(tmp_path) == ()
    for rank in (10, 2, 0, 1):
        (tmp_path / f"bench-r{rank}.json").write_text(json.dumps({"rank": rank}))
    assert [r["rank"] for r in read_results(tmp_path)] == [0, 1, 2, 10]
    (tmp_path / "bench.json").write_text(json.dumps({"rank": "chief"}))
    assert read_results(tmp_path) == ({"rank": "chief"},)


def test_peak_memory_is_the_largest_process() -> None:
    usage = Usage()
    assert usage.peak_rss_mb is None
    usage.rss_peak_mb.update({1: 40.0, 2: 700.0, 3: 650.0})
    assert usage.peak_rss_mb == 700.0


def test_diagnosis_accounts_for_each_backends_step() -> None:
    # tf: 2 x 64 examples at 1,280 ex/s = 100 ms per step; 90 % of 2 cores -> 90 ms of CPU per worker-step.
    d = diagnose(_evidence(full_eps={"tf": 1_280.0}, cpu_util={"tf": 0.9}, allreduce_s={"tf": 0.015}))
    line = next(x for x in d.evidence if x.startswith("where the tf step goes"))
    assert "100.0 ms = compute 64.0 ms + 36.0 ms" in line
    assert "90.0 ms of CPU per step, 26.0 ms of it beyond the compute" in line
    assert "10.0 ms idle" in line and "alone takes 15.0 ms" in line
    assert not any("where the mpi" in x for x in d.evidence)  # no CPU figure for mpi: no account


def test_copies_are_measured_only_while_they_all_ran() -> None:
    early = {"timeline": [[10, 100.0], [20, 101.0], [30, 102.0], [40, 103.0]], "global_batch": 64}
    late = {"timeline": [[10, 101.0], [20, 102.0], [30, 103.0], [40, 103.5]], "global_batch": 64}
    for s in (early, late):
        s["first_step_at"] = 99.0
    window = common_window([early, late], warmup=10)
    assert window == (101.0, 103.0)
    alone_too = sample_from_summary(late, 10, 90.0)
    shared = sample_from_summary(late, 10, 90.0, within=window)
    assert alone_too.examples_per_sec == pytest.approx(30 * 64 / 2.5)  # includes its last, solo block
    assert shared.examples_per_sec == pytest.approx(20 * 64 / 2.0)
    assert common_window([early, {**late, "timeline": [[10, 200.0], [20, 201.0]]}], warmup=10) is None
