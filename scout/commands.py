"""What each ``scout`` subcommand does (``scout.cli`` parses the command line and runs one of these
in its process). Rules call them with a JSON spec resolved by ``scout.grid``, so every job's full
configuration is visible in its params."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from scout.workflow import REMAKE_ENV, resources_of


def _spec(text: str) -> dict:
    """A JSON object, given inline or as @file."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise SystemExit(f"scout: --spec {text}: cannot read it ({exc.strerror or exc})") from exc
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

    g = grid.Grid.of(tuning.resolve(grid.check(config.load(args.config, args.select))))
    cells, units, search = g.cells, jobs.eval_units(g), g.search_cells
    name = " + ".join(args.config)
    tuned = f", {len(search)} tuning runs first ({', '.join(sorted({c.setting for c in search}))})" if search else ""
    print(f"{name}: valid ({g.config['world']} world): {len(cells)} training cells, {len(units)} evaluations{tuned}")
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
    placed = resources_of(args.spec)  # the workflow writes them beside the spec file (verl)
    if placed is not None:
        spec = {**spec, "resources": placed}
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
    from scout.status import incomplete_hint

    for out in args.runs:
        try:
            runs.restore(out, log=_log)
        except runs.RunMismatch as exc:
            raise SystemExit(f"scout restore: {exc}") from exc
        hint = incomplete_hint(Path.cwd(), os.path.relpath(Path(out) / "train.json"))
        if hint:
            _log(hint)
    return 0


def cmd_evaluate(args) -> int:
    from scout.evaluate import evaluate

    evaluate(_spec(args.spec), args.out, engine=args.engine, log=_log)
    return 0


def cmd_serve_teacher(args) -> int:
    from scout.serve import serve

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


def _grid(args):
    """The grid of a command's config (``_config``), resolved once for everything the command reads."""
    from scout.grid import Grid

    return Grid.of(_config(args))


def cmd_report(args) -> int:
    from scout.report import ReportError, build, console_summary

    config = _config(args)
    if not Path(config["results"]).is_dir():  # a mistyped --results: a report of nothing would say 26 not measured
        raise SystemExit(f"scout report: no results folder at {config['results']}: nothing has run there (is the "
                         "path right? the config's `results:` or --results names it)")  # fmt: skip
    try:
        manifest = build(config, args.out, pdf=False if args.no_pdf else None, log=_log)
    except ReportError as exc:
        raise SystemExit(f"scout report: {exc}") from exc
    if args.console is not None:  # under --log the claims go to the console as well as to the log
        from scout import verdicts

        found = verdicts.from_records(manifest["claims"])
        pdf = manifest["pdf"] or manifest.get("pdf_skipped", "not built")
        summary = console_summary(found, Path(manifest["html"]), pdf, manifest["caveats"], manifest["alpha"],
                                  across=manifest.get("across", []))
        os.write(args.console, (summary + "\n").encode())
    return 0


def cmd_import_results(args) -> int:
    from scout import results

    g = _grid(args)
    try:
        records = results.parse_import(g, args.csv, scale=args.scale)
        written = results.write_imported(g.paths, records, replace=args.replace)
    except results.ImportRefused as exc:
        raise SystemExit(f"scout import-results: {exc}") from exc
    cells = {(r["setting"], r["variant"], r["seed"]) for r in records}
    _log(f"imported {len(written)} records ({len(cells)} runs) from {args.csv} into {g.paths.imported_dir()}")
    return 0


def cmd_plan(args) -> int:
    from scout import cost, plan, tuning
    from scout.freshness import Freshness

    g = _grid(args)
    gpu, pilots = cost.gpu(args.gpu), cost.read_pilots(g)
    jobs = plan.grid_jobs(g, stale=frozenset(x.target for x in Freshness(g).stale()), gpu=gpu, pilots=pilots)
    print(plan.render(jobs))
    if not jobs["done"].all():
        print(plan.render_expected(jobs, gpu, pilots))
    print(plan.sharing(g))
    for costs in (plan.render_teacher_options(g), plan.render_teacher_servers(g), plan.render_server_limits(g),
                  plan.render_time_limit(g, jobs)):  # fmt: skip
        if costs:
            print(costs)
    waiting = tuning.pending(g.config)
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
        if cfg.get("selected_from"):
            raise SystemExit("scout fingerprints --record: a selection makes only some of the recorded files; "
                             "record the whole grid (without select)")  # fmt: skip
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

    print(status.render(status.status(_grid(args), args.directory)))
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

    found = preflight.run(_grid(args), log=_log)  # a backend that checks no cells says so (Backend.preflight)
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
