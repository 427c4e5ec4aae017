# SCOUT experiment pipeline. The toy world runs by default:
#   snakemake --cores 2
# The paper grid on a Slurm cluster:
#   snakemake --configfile config/paper.yaml --profile profiles/slurm
from snakemake.utils import min_version

min_version("9.0")


# The toy world is the default; --configfile config/paper.yaml replaces it (not merged into it),
# while --config KEY=VALUE alone overrides single keys of the default.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/toy.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/tuning.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/pilot.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        summary_files(),
        report_files(),
        # the choices too: the report's inputs wait on them (a checkpoint), so a search added to a
        # finished grid is planned from here
        tuning_files(),
        independent_targets(),


# The teacher servers the workflow starts (scout.serving) live by this run's heartbeat, from its start
# to its end, whichever way it ends
onstart:
    serving_start()


onsuccess:
    serving_end()


onerror:
    serving_end()
