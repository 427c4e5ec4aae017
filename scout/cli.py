"""The ``scout`` command: one subcommand per workflow stage (``scout.commands`` does each), run in a
process that logs to a file, ends cleanly on Ctrl-C and keeps a console for what a person must see."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from scout import commands
from scout.workflow import REMAKE_ENV


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
    s.set_defaults(func=commands.cmd_check_config)
    for name, func, help_ in [
        ("toy-data", commands.cmd_toy_data, "write the toy train splits and benchmarks"),
        ("toy-pretrain", commands.cmd_toy_pretrain, "train a tiny model from scratch on worked solutions"),
        ("train", commands.cmd_train, "train one cell (or prepare a teacher)"),
        ("evaluate", commands.cmd_evaluate, "evaluate one checkpoint on its domain's benchmarks"),
        ("prepare-data", commands.cmd_prepare_data, "turn a hub dataset into local JSONL (paper world)"),
        ("analyze", commands.cmd_analyze, "probe the initial and the SCOUT-trained teacher (report figures)"),
        ("choose-lr", commands.cmd_choose_lr, "choose a tuned LR from its search runs' validation scores"),
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
    s.set_defaults(func=commands.cmd_serve_teacher)
    s = sub.add_parser("await-teacher", help="wait for (or launch) a served cell's teacher server")
    s.add_argument("--setting", required=True)
    s.add_argument("--user", required=True, help="the cell's train.json")
    s.add_argument("--out", required=True, help="the flag written once the server answers")
    s.set_defaults(func=commands.cmd_await_teacher)
    s = sub.add_parser("grade", help="regrade saved generations without regenerating (see the README)")
    s.add_argument("generations", nargs="+", help="BENCHMARK.generations.jsonl file(s) of one benchmark")
    s.add_argument("--data", required=True, help="the benchmark's prepared JSONL (common schema)")
    s.add_argument("--out", help="folder for the new record and verdicts (default: beside the generations)")
    s.set_defaults(func=commands.cmd_grade)
    s = sub.add_parser("toy-tokenizer", help="write the toy tokenizer")
    s.add_argument("--out", required=True)
    s.set_defaults(func=commands.cmd_toy_tokenizer)


def _grid_commands(sub) -> None:
    """What a user runs over a grid's results: the report, imports, the plan, the digits."""
    s = sub.add_parser("report", help="render every table and figure, and the PDF, from cached results")
    _add_config_args(s)
    s.add_argument("--out", help="output folder (default: {results}/report)")
    s.add_argument("--no-pdf", action="store_true", help="write tables and figures only")
    s.set_defaults(func=commands.cmd_report)
    s = sub.add_parser("import-results", help="import per-run numbers (setting,method,run,benchmark,mean,sem)")
    s.add_argument("csv")
    _add_config_args(s)
    s.add_argument("--scale", choices=["fraction", "percent"], default="fraction", help="units of mean and sem")
    s.add_argument("--replace", action="store_true", help="overwrite records imported before")
    s.set_defaults(func=commands.cmd_import_results)
    s = sub.add_parser("plan", help="what the grid requests from the cluster: jobs and GPU-hours per experiment")
    _add_config_args(s)
    s.add_argument("--csv", help="also write every job with its resources to this CSV file")
    s.add_argument("--gpu", default="a100-40", metavar="NAME",
                   help="the GPU the expected cost is modelled for: a100-40 (default), a100-80, h100, h200, or "
                        "TFLOPS:GB for another (dense bf16 peak, memory); a pilot's measurements take precedence")  # fmt: skip
    s.set_defaults(func=commands.cmd_plan)
    s = sub.add_parser(
        "fingerprints", help="compare a toy grid's files with the recorded digits (config/fingerprints.yaml)"
    )
    _add_config_args(s)
    s.add_argument("--section", default="toy", help="the record to compare with (toy: config/config.yaml's grid)")
    s.add_argument("--strict", action="store_true", help="exit 1 when a file differs or is missing")
    s.add_argument("--record", metavar="NOTE", help="record this grid's fingerprints as the section, with a note")
    s.set_defaults(func=commands.cmd_fingerprints)


def _cluster_commands(sub) -> None:
    """Where a grid stands, putting a run back, and the cluster's checks and launcher."""
    s = sub.add_parser("status", help="where a running or finished grid stands (cells, steps, time left)")
    _add_config_args(s)
    s.add_argument("--directory", default=".", help="snakemake's working directory (default: here)")
    s.set_defaults(func=commands.cmd_status)
    s = sub.add_parser("restore", help="put back a finished training run that a failed rerun replaced")
    s.add_argument("runs", nargs="+", metavar="RUN", help="a run folder (results/train/SETTING/VARIANT/sSEED)")
    s.set_defaults(func=commands.cmd_restore)
    s = sub.add_parser("preflight", help="check every training cell against the installed verl (no GPU needed)")
    _add_config_args(s)
    s.add_argument("--out", help="also write the table as JSON to this file (the workflow's marker)")
    s.set_defaults(func=commands.cmd_preflight)
    s = sub.add_parser("ray-run", help="start Ray over the Slurm allocation (or locally), run a driver, stop Ray")
    s.add_argument("--cpus-per-node", type=int, required=True)
    s.add_argument("--gpus-per-node", type=int, default=0)
    s.add_argument("--object-store-mb", type=int, help="Ray object store per node (default: Ray's 30%% of memory)")
    s.add_argument("driver", nargs=argparse.REMAINDER, help="-- then the driver command")
    s.set_defaults(func=commands.cmd_ray_run)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # its reader went away (`scout status | head`): nothing more to say, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush stays quiet
        return 1


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    args.console = None  # under --log: the console's stderr, for what a person should see at once
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
    from scout.placement import PlacementError

    try:
        return args.func(args)
    except (ConfigError, PlacementError) as exc:  # a job's resources that cannot hold its pools too
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
TAIL_LINES = 15


def _logged(args) -> int:
    """Run the command with stdout and stderr (of this process and its children) in ``args.log``;
    on failure, tell the console why in one screen: the log's last lines and where it is."""
    import traceback

    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    console = args.console = os.dup(2)
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
