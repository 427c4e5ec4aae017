# Tuning: the paper's learning-rate searches for the settings whose LRs say `tuned` (scout.tuning).
# Each search run trains with the train rule (its variant is opd-lr{x} or scout-tlr{x}), is scored on
# its domain's validation set here, and the best point is written to results/tuning/{setting}/{param}.json,
# which the grid's cells of that setting read (common.smk: resolved).
if TUNED:

    rule validate:
        input:
            validate_inputs,
        output:
            f"{RES}/tuning/{{setting}}/{{variant}}/s{{seed}}/validation/{{dataset}}.json",
        log:
            f"{RES}/logs/tuning/{{setting}}/{{variant}}/s{{seed}}/{{dataset}}.log",
        benchmark:
            f"{RES}/benchmarks/validate/{{setting}}/{{variant}}/s{{seed}}/{{dataset}}.tsv"
        priority: 3  # the choice, and every cell of the setting, waits for it
        conda:
            EVAL_ENV
        threads: cluster_threads("evaluate")
        resources:
            **cluster_resources("evaluate"),
        params:
            spec=validate_spec,
            out=folder_of(),
        shell:
            "scout --log {log} evaluate --spec {params.spec:q} --out {params.out}"

    checkpoint choose_lr:
        input:
            choice_inputs,
        output:
            f"{RES}/tuning/{{setting}}/{{param}}.json",
        log:
            f"{RES}/logs/tuning/{{setting}}/{{param}}.log",
        wildcard_constraints:
            param="|".join(scout_tuning.PARAMS),
        priority: 3  # every cell of the setting waits for it
        conda:
            CPU_ENV
        params:
            spec=choice_spec,
        shell:
            "scout --log {log} choose-lr --spec {params.spec:q} --out {output}"

    localrules:
        choose_lr,
