"""The ``scout`` command: one subcommand per workflow stage. Rules call these with a JSON spec
resolved by ``scout.grid``, so every job's full configuration is visible in its params."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from scout.workflow import REMAKE_ENV


def _spec(text: str) -> dict:
    """A JSON object, given inline or as @file."""
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"scout: --spec is not valid JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise SystemExit("scout: --spec must be a JSON object")
    return spec


def _log(msg: str) -> None:
    print(msg, flush=True)


def cmd_check_config(args) -> int:
    from scout import config, grid, jobs, tuning

    cfg = tuning.resolve(grid.check(config.load(args.config, args.select)))
    cells = grid.cells(cfg)
    units = jobs.eval_units(cfg)
    name = " + ".join(args.config)
    search = grid.search_cells(cfg)
    tuned = f", {len(search)} tuning runs first ({', '.join(sorted({c.setting for c in search}))})" if search else ""
    print(f"{name}: valid ({cfg['world']} world): {len(cells)} training cells, {len(units)} evaluations{tuned}")
    return 0


def cmd_toy_data(args) -> int:
    from scout.toy.world import build_data

    counts = build_data(_spec(args.spec), args.out)
    _log(", ".join(f"{k}: {v} rows" for k, v in counts.items()))
    return 0


def cmd_toy_tokenizer(args) -> int:
    from scout.toy.world import build_tokenizer_files

    _log(f"toy tokenizer: {build_tokenizer_files(args.out)} tokens -> {args.out}")
    return 0


def cmd_toy_pretrain(args) -> int:
    from scout.toy.world import pretrain

    spec = _spec(args.spec)
    info = pretrain(spec["arch"], spec["tokenizer"], spec["data"], args.out, spec.get("seed", 0), log=_log,
                    spec=spec)  # fmt: skip
    _log(json.dumps(info))
    return 0


def cmd_train(args) -> int:
    from scout import backends
    from scout.tuning import TUNED

    spec = _spec(args.spec)
    backend = backends.of(spec)
    lrs = {"lr": spec.get("lr"), "teacher_lr": spec.get("method_cfg", {}).get("scout", {}).get("teacher_lr")}
    pending = [k for k, v in lrs.items() if v == TUNED]
    if pending:
        raise SystemExit(
            f"the spec's {' and '.join(pending)}: 'tuned'; run the tuning stage first "
            "(snakemake runs it before the cells that read its choice), or give a number"
        )
    try:
        backend.train(spec, args.out, log=_log, dry_run=args.dry_run)
    except BaseException:
        _restore_hint(args.out)
        raise
    return 0


def _restore_hint(out: str) -> None:
    """After a failed training: where the finished run it replaced is kept (Snakemake deleted its
    train.json before the job), and the command that puts it back."""
    from scout import runs

    try:
        kept = runs.restorable(out)
    except runs.RunMismatch:
        return
    _log(f"the finished run of this cell is kept{'' if kept == Path(out) else f' at {kept}'}; "
         f"`scout restore {out}` puts it back with its train.json, so nothing downstream is remade")  # fmt: skip


def cmd_restore(args) -> int:
    from scout import runs

    for out in args.runs:
        try:
            runs.restore(out, log=_log)
        except runs.RunMismatch as exc:
            raise SystemExit(f"scout restore: {exc}") from exc
    return 0


def cmd_evaluate(args) -> int:
    from scout.evaluate import evaluate

    evaluate(_spec(args.spec), args.out, engine=args.engine, log=_log)
    return 0


def cmd_serve_teacher(args) -> int:
    from scout.serving import serve

    serve(_spec(args.spec), args.id, log=_log)
    return 0


def cmd_await_teacher(args) -> int:
    """A served cell's gate: its teacher's server up (launched if none is), before the cell is
    submitted; the flag it writes names the run and the server."""
    import time

    from scout import serving, teacher_server

    server = teacher_server.server_for(args.setting)
    if not server or "spec" not in server:
        raise SystemExit(f"scout await-teacher: {args.setting}'s teacher is not served by the workflow "
                         f"({teacher_server.ENV} names no server spec for it)")  # fmt: skip
    run, how = os.environ.get(serving.RUN_ENV, ""), os.environ.get(serving.LAUNCH_ENV, "local")
    found = serving.ensure(server["spec"], args.user, run, how, log=_log)
    _log(f"teacher server of {server['spec']['model']} answers at {found['url']} (id {found['id']}): {args.user} may start")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"run": run, "server": found["id"], "url": found["url"], "time": time.time()}))
    return 0


def cmd_prepare_data(args) -> int:
    from scout.prepare import prepare

    prepare(_spec(args.spec), args.out, log=_log)
    return 0


def cmd_grade(args) -> int:
    from scout.evaluate import regrade

    for path in args.generations:
        regrade(args.data, path, args.out, log=_log)
    return 0


def cmd_analyze(args) -> int:
    from scout.analysis import run

    n_cont, n_ent = run(_spec(args.spec), args.out, log=_log)
    _log(f"{n_cont} continuation points, {n_ent} entropy points -> {args.out}")
    return 0


def cmd_choose_lr(args) -> int:
    from scout.tuning import write_choice

    result = write_choice(_spec(args.spec), args.out, log=_log)
    _log(f"{result['setting']}: {result['param']} = {result['chosen']:g} -> {args.out}")
    return 0


def _config(args) -> dict:
    """The config of a report/import command: --spec (JSON, as rules pass it) or --configfile FILE."""
    from scout import config, grid, tuning

    if args.spec:
        cfg = config.validate(_spec(args.spec))
    else:
        cfg = config.load(args.configfile or ["config/config.yaml"], args.select, overrides=_overrides(args.config))
        _export_remake_args(args)
    grid.check(cfg)
    if args.results:
        cfg["results"] = args.results
    return tuning.resolve(cfg)  # tuned LRs as the tuning stage chose them (still `tuned` while it searches)


def cmd_report(args) -> int:
    from scout.report import ReportError, build, console_summary

    try:
        manifest = build(_config(args), args.out, pdf=False if args.no_pdf else None, log=_log)
    except ReportError as exc:
        raise SystemExit(f"scout report: {exc}") from exc
    if _CONSOLE is not None:  # under --log the claims go to the console as well as to the log
        from scout import claims

        found = claims.from_records(manifest["claims"])
        pdf = manifest["pdf"] or manifest.get("pdf_skipped", "not built")
        summary = console_summary(found, Path(manifest["html"]), pdf, manifest["caveats"], manifest["alpha"],
                                  across=manifest.get("across", []))
        os.write(_CONSOLE, (summary + "\n").encode())
    return 0


def cmd_import_results(args) -> int:
    from scout import results

    cfg = _config(args)
    try:
        records = results.parse_import(cfg, args.csv, scale=args.scale)
        paths = results.write_imported(cfg, records, replace=args.replace)
    except results.ImportRefused as exc:
        raise SystemExit(f"scout import-results: {exc}") from exc
    cells = {(r["setting"], r["variant"], r["seed"]) for r in records}
    _log(
        f"imported {len(paths)} records ({len(cells)} runs) from {args.csv} into {results.results_dir(cfg) / 'imported'}"
    )
    return 0


def cmd_plan(args) -> int:
    from scout import cost, plan, tuning
    from scout.freshness import Freshness

    cfg = _config(args)
    gpu, pilots = cost.gpu(args.gpu), cost.read_pilots(cfg)
    jobs = plan.grid_jobs(cfg, stale=frozenset(x.target for x in Freshness(cfg).stale()), gpu=gpu, pilots=pilots)
    print(plan.render(jobs))
    if not jobs["done"].all():
        print(plan.render_expected(jobs, gpu, pilots))
    print(plan.sharing(cfg))
    for costs in (plan.render_teacher_options(cfg), plan.render_teacher_servers(cfg), plan.render_server_limits(cfg)):
        if costs:
            print(costs)
    waiting = tuning.pending(cfg)
    if waiting:
        print(f"Tuning: {', '.join(f'{s} {p}' for s, p in waiting)} not chosen yet; until then each tuned "
              "setting's grid cells count as runs of their own, and the chosen points' seed-1 runs will be theirs.")  # fmt: skip
    if args.csv:
        jobs.to_csv(args.csv, index=False)
        _log(f"{len(jobs)} jobs -> {args.csv}")
    return 0


def cmd_fingerprints(args) -> int:
    from scout import reproducibility as rep

    cfg = _config(args)
    if cfg["world"] != "toy":
        raise SystemExit(
            "scout fingerprints: only toy grids are fingerprinted (the paper grid's digits follow its GPUs)"
        )
    if args.record:
        got = rep.measure(cfg)
        rep.write_record(args.section, got, args.record)
        _log(f"recorded {sum(h is not None for h in got.values())} fingerprints as '{args.section}' in {rep.RECORD}")
        return 0
    c = rep.check(cfg, args.section)
    print(rep.render(c, args.section))
    n = c.counts
    return 1 if (args.strict and (n["differs"] or n["missing"])) else 0


def cmd_status(args) -> int:
    from scout import status

    print(status.render(status.status(_config(args), args.directory)))
    return 0


def offline_unless_hub_reachable(log=_log, timeout: float = 3.0) -> bool:
    """Set HF_HUB_OFFLINE when the hub cannot be reached, before transformers is imported: offline,
    every lookup of a model by name fails at once instead of retrying for half a minute per cell."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE"):
        return True
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or ""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return False
    except OSError:
        os.environ["HF_HUB_OFFLINE"] = "1"
        log(f"note: {host} cannot be reached; models and tokenizers come from local paths and the HF cache only")
        return True


def cmd_preflight(args) -> int:
    """Check every training cell with its backend (verl: against the installed verl) before GPU hours are spent."""
    import json as _json

    offline_unless_hub_reachable()
    from scout import preflight

    cfg = _config(args)
    found = preflight.run(cfg, log=_log)  # a backend that checks no cells says so (Backend.preflight)
    rows, pairs = found.cells, found.pairs
    if rows:
        print(preflight.table(rows))
    for pair in pairs:  # the tokenizer and template check of each teacher-student pair
        print(f"\n{pair.name}: {pair.verdict}" + "".join(f"\n  {k}: {v}" for k, v in pair.checks.items()))
    problems = [f"{x.name}: {p}" for x in rows + pairs for p in x.problems]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        record = [{"cell": r.name, **r.checks} for r in rows] + [{"pair": x.name, **x.checks} for x in pairs]
        Path(args.out).write_text(_json.dumps(record, indent=1))
    if problems:
        raise SystemExit("scout preflight: refused\n  " + "\n  ".join(problems))
    _log(f"preflight: {len(rows)} cells and {len(pairs)} teacher-student pairs pass")
    return 0


def cmd_ray_run(args) -> int:
    from scout.raycluster import RayClusterError, run

    driver = args.driver[1:] if args.driver[:1] == ["--"] else args.driver
    try:
        return run(
            driver, cpus=args.cpus_per_node, gpus=args.gpus_per_node, object_store_mb=args.object_store_mb, log=_log
        )
    except RayClusterError as exc:
        raise SystemExit(f"scout ray-run: {exc}") from exc


def _add_select_arg(s) -> None:
    s.add_argument(
        "--select",
        metavar="YAML",
        help="a reduced experiment, as snakemake's --config select=...: '{settings: [...], methods: [...], seeds: [1]}'",
    )


class _Once(argparse.Action):
    """A flag given twice is refused: snakemake, whose flags these mirror, silently keeps the last."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(
                f"{option_string} given twice (snakemake would keep only the last): give all its values after one {option_string}"
            )
        setattr(namespace, self.dest, values)


def _add_config_args(s) -> None:
    s.add_argument(
        "--configfile",
        nargs="+",
        action=_Once,
        metavar="FILE",
        help="config file(s) (default: config/config.yaml); each later one is merged into those before, as "
        "snakemake --configfile A B merges B into A",
    )
    s.add_argument(
        "--config",
        nargs="+",
        action=_Once,
        metavar="KEY=VALUE",
        help="keys over the config files, read as snakemake --config reads them: select='{seeds: [1]}', results=DIR",
    )
    _add_select_arg(s)
    s.add_argument("--spec", help="the config as a JSON object or @file (what the workflow passes)")
    s.add_argument("--results", help="results folder (default: the config's `results`)")


def _export_remake_args(args) -> None:
    """The remake commands this command suggests (``scout.io.remake_command``) keep its config files
    and selection, as those the workflow's jobs suggest keep the workflow's."""
    from scout.workflow import remake_args

    pairs = [*(args.config or []), *([f"select={args.select}"] if args.select else [])]
    argv = [
        "snakemake",
        *(["--configfile", *args.configfile] if args.configfile else []),
        *(["--config", *pairs] if pairs else []),
    ]
    os.environ.setdefault(REMAKE_ENV, shlex.join(remake_args(argv)))


def _overrides(entries: list[str] | None) -> dict | None:
    """``--config KEY=VALUE ...`` as snakemake parses it (its own parser: values are text unless they
    read as numbers, booleans or YAML), refusing a file given where a pair is meant."""
    if not entries:
        return None
    for entry in entries:
        if "=" not in entry:
            looks = entry.endswith((".yaml", ".yml", ".json")) or Path(entry).is_file()
            hint = f"; a config file goes after --configfile: --configfile {entry}" if looks else ""
            raise SystemExit(f"scout: --config takes KEY=VALUE pairs, as snakemake's does; {entry!r} is not one{hint}")
    from snakemake.cli import parse_config

    return parse_config(entries)


def parser() -> argparse.ArgumentParser:
    """Every command: the workflow's jobs, the teacher server's, the grid's and the cluster's."""
    p = argparse.ArgumentParser(prog="scout", description=__doc__)
    p.add_argument(
        "--log", help="write all output to this file; on failure, print the reason and its last lines to stderr"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in (_job_commands, _grid_commands, _cluster_commands):
        add(sub)
    return p


def _job_commands(sub) -> None:
    """What the workflow's rules run, one job each (a spec in, an output folder)."""
    s = sub.add_parser("check-config", help="validate a config file and count its grid")
    s.add_argument(
        "config", nargs="+", help="config file; more files are merged into it, as snakemake --configfile A B"
    )
    _add_select_arg(s)
    s.set_defaults(func=cmd_check_config)
    for name, func, help_ in [
        ("toy-data", cmd_toy_data, "write the toy train splits and benchmarks"),
        ("toy-pretrain", cmd_toy_pretrain, "train a tiny model from scratch on worked solutions"),
        ("train", cmd_train, "train one cell (or prepare a teacher)"),
        ("evaluate", cmd_evaluate, "evaluate one checkpoint on its domain's benchmarks"),
        ("prepare-data", cmd_prepare_data, "turn a hub dataset into local JSONL (paper world)"),
        ("analyze", cmd_analyze, "probe the initial and the SCOUT-trained teacher (report figures)"),
        ("choose-lr", cmd_choose_lr, "choose a tuned LR from its search runs' validation scores"),
    ]:
        s = sub.add_parser(name, help=help_)
        s.add_argument("--spec", required=True, help="JSON object or @file")
        s.add_argument("--out", required=True)
        if name == "evaluate":
            s.add_argument("--engine", choices=["transformers", "vllm"], help="override the spec's engine")
        if name == "train":
            s.add_argument(
                "--dry-run",
                action="store_true",
                help="verl backend: write the data's parquet twin and the checked verl config, do not train",
            )
        s.set_defaults(func=func)
    s = sub.add_parser("serve-teacher", help="serve a frozen teacher while a run needs it (launched by await-teacher)")
    s.add_argument("--spec", required=True, help="JSON object or @file")
    s.add_argument("--id", required=True, help="the server's id, written into its address")
    s.set_defaults(func=cmd_serve_teacher)
    s = sub.add_parser("await-teacher", help="wait for (or launch) a served cell's teacher server")
    s.add_argument("--setting", required=True)
    s.add_argument("--user", required=True, help="the cell's train.json")
    s.add_argument("--out", required=True, help="the flag written once the server answers")
    s.set_defaults(func=cmd_await_teacher)
    s = sub.add_parser("grade", help="regrade saved generations without regenerating (see the README)")
    s.add_argument("generations", nargs="+", help="BENCHMARK.generations.jsonl file(s) of one benchmark")
    s.add_argument("--data", required=True, help="the benchmark's prepared JSONL (common schema)")
    s.add_argument("--out", help="folder for the new record and verdicts (default: beside the generations)")
    s.set_defaults(func=cmd_grade)
    s = sub.add_parser("toy-tokenizer", help="write the toy tokenizer")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_toy_tokenizer)


def _grid_commands(sub) -> None:
    """What a user runs over a grid's results: the report, imports, the plan, the digits."""
    s = sub.add_parser("report", help="render every table and figure, and the PDF, from cached results")
    _add_config_args(s)
    s.add_argument("--out", help="output folder (default: {results}/report)")
    s.add_argument("--no-pdf", action="store_true", help="write tables and figures only")
    s.set_defaults(func=cmd_report)
    s = sub.add_parser("import-results", help="import per-run numbers (setting,method,run,benchmark,mean,sem)")
    s.add_argument("csv")
    _add_config_args(s)
    s.add_argument("--scale", choices=["fraction", "percent"], default="fraction", help="units of mean and sem")
    s.add_argument("--replace", action="store_true", help="overwrite records imported before")
    s.set_defaults(func=cmd_import_results)
    s = sub.add_parser("plan", help="what the grid requests from the cluster: jobs and GPU-hours per experiment")
    _add_config_args(s)
    s.add_argument("--csv", help="also write every job with its resources to this CSV file")
    s.add_argument("--gpu", default="a100-40", metavar="NAME",
                   help="the GPU the expected cost is modelled for: a100-40 (default), a100-80, h100, h200, or "
                        "TFLOPS:GB for another (dense bf16 peak, memory); a pilot's measurements take precedence")  # fmt: skip
    s.set_defaults(func=cmd_plan)
    s = sub.add_parser(
        "fingerprints", help="compare a toy grid's files with the recorded digits (config/fingerprints.yaml)"
    )
    _add_config_args(s)
    s.add_argument("--section", default="toy", help="the record to compare with (toy: config/config.yaml's grid)")
    s.add_argument("--strict", action="store_true", help="exit 1 when a file differs or is missing")
    s.add_argument("--record", metavar="NOTE", help="record this grid's fingerprints as the section, with a note")
    s.set_defaults(func=cmd_fingerprints)


def _cluster_commands(sub) -> None:
    """Where a grid stands, putting a run back, and the cluster's checks and launcher."""
    s = sub.add_parser("status", help="where a running or finished grid stands (cells, steps, time left)")
    _add_config_args(s)
    s.add_argument("--directory", default=".", help="snakemake's working directory (default: here)")
    s.set_defaults(func=cmd_status)
    s = sub.add_parser("restore", help="put back a finished training run that a failed rerun replaced")
    s.add_argument("runs", nargs="+", metavar="RUN", help="a run folder (results/train/SETTING/VARIANT/sSEED)")
    s.set_defaults(func=cmd_restore)
    s = sub.add_parser("preflight", help="check every training cell against the installed verl (no GPU needed)")
    _add_config_args(s)
    s.add_argument("--out", help="also write the table as JSON to this file (the workflow's marker)")
    s.set_defaults(func=cmd_preflight)
    s = sub.add_parser("ray-run", help="start Ray over the Slurm allocation (or locally), run a driver, stop Ray")
    s.add_argument("--cpus-per-node", type=int, required=True)
    s.add_argument("--gpus-per-node", type=int, default=0)
    s.add_argument("--object-store-mb", type=int, help="Ray object store per node (default: Ray's 30%% of memory)")
    s.add_argument("driver", nargs=argparse.REMAINDER, help="-- then the driver command")
    s.set_defaults(func=cmd_ray_run)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    warn_if_another_checkout()
    # before torch computes anything: the same digits on every x86-64 machine with AVX2
    from scout.reproducibility import pin_numerics

    pin_numerics()
    if args.cmd in _TORCH_JOBS:
        _keep_freed_memory()
    remake = os.environ.get(REMAKE_ENV)  # a command's remake hints are its own (_export_remake_args)
    try:
        if args.log and os.environ.get(_LOGGING) != os.path.abspath(args.log):
            code = _logged(args)
        else:
            code = _dispatch(args)
    finally:
        if remake is None:
            os.environ.pop(REMAKE_ENV, None)
        else:
            os.environ[REMAKE_ENV] = remake
    if args.cmd in _TORCH_JOBS:
        _exit_now(code or 0)
    return code


# Jobs that load torch: tearing its interpreter down at exit takes about 0.4 s, a tenth of a toy
# evaluation job; they end once their outputs are written and the exit handlers have run
_TORCH_JOBS = {"toy-pretrain", "train", "evaluate", "analyze"}


def _keep_freed_memory() -> None:
    """glibc returns every freed block above 128 KB to the system and asks for it again at the next
    allocation (page faults: most of a toy evaluation's time in the kernel). Blocks up to 32 MiB
    (glibc's largest mmap threshold) are kept in the heap instead, and the heap is trimmed only past
    1 GiB free: a toy evaluation job about 5% faster, its peak memory about 20 MiB higher."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(name)
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD


def _exit_now(code: int) -> None:
    """Exit without the interpreter's teardown: Python's exit handlers run (loggers, pools, Ray),
    the streams are flushed, and module objects are left to the operating system."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _dispatch(args) -> int:
    from scout.catalogue import DataError
    from scout.config import ConfigError
    from scout.io import DamagedInput, JobStopped

    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"scout: {exc}", file=sys.stderr)
        return 2
    except (DataError, DamagedInput, JobStopped) as exc:  # bad, missing or damaged data, a check: one line
        raise SystemExit(f"scout {args.cmd}: {exc}") from exc
    except KeyboardInterrupt:  # Ctrl-C: a person's choice, not a failure to explain with a traceback
        print(f"scout {args.cmd}: interrupted{_resumes(args)}", file=sys.stderr)
        return INTERRUPTED


INTERRUPTED = 130  # the shell's code for a command ended by SIGINT


def _resumes(args) -> str:
    """Where an interrupted training picks up: its newest checkpoint, kept in its folder."""
    if args.cmd != "train" or not getattr(args, "out", None):
        return ""
    from scout import runs

    step = runs.last_checkpoint(Path(args.out))
    where = f"from its checkpoint at step {step}" if step else "from step 0 (no checkpoint was written yet)"
    return f"; the same command (or snakemake) resumes it {where}"


_LOGGING = "SCOUT_LOG"  # the log a parent scout already writes to (a driver under `scout ray-run`)
_CONSOLE: int | None = None  # under --log: the console's stderr, for what a person should see at once
TAIL_LINES = 15


def _logged(args) -> int:
    """Run the command with stdout and stderr (of this process and its children) in ``args.log``;
    on failure, tell the console why in one screen: the log's last lines and where it is."""
    import traceback

    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    global _CONSOLE
    console = _CONSOLE = os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ[_LOGGING] = str(log.resolve())
    try:
        code = _dispatch(args)
    except SystemExit as exc:
        code = exc.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
        lines = log.read_text(errors="replace").rstrip().splitlines()[-TAIL_LINES:]
        what = "was interrupted" if code == INTERRUPTED else f"failed (exit {code})"
        text = f"scout {args.cmd} {what}; the last lines of {log}:\n" + "".join(
            f"  | {line}\n" for line in lines
        )
        os.write(console, text.encode())
    return code or 0


def warn_if_another_checkout() -> None:
    """Jobs run the installed ``scout``; when that is not the checkout whose Snakefile launched
    them (``SCOUT_WORKFLOW``, set by the workflow), they would run other code without a word."""
    workflow = os.environ.get("SCOUT_WORKFLOW")
    here = Path(__file__).resolve().parent.parent
    if workflow and Path(workflow).resolve() != here:
        print(
            f"warning: this scout is {here}, but the workflow that runs it is {workflow}: jobs run the other "
            f"checkout's code (pip install -e {workflow})",
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(main())
