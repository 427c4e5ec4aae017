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
        params:
            spec=validate_spec,
            out=folder_of(),
        log:
            f"{RES}/logs/tuning/{{setting}}/{{variant}}/s{{seed}}/{{dataset}}.log",
        benchmark:
            f"{RES}/benchmarks/validate/{{setting}}/{{variant}}/s{{seed}}/{{dataset}}.tsv"
        priority: 3  # the choice, and every cell of the setting, waits for it
        threads: cluster_threads("evaluate")
        resources:
            **cluster_resources("evaluate"),
        conda:
            EVAL_ENV
        shell:
            "scout --log {log} evaluate --spec {params.spec:q} --out {params.out}"

    checkpoint choose_lr:
        input:
            choice_inputs,
        output:
            f"{RES}/tuning/{{setting}}/{{param}}.json",
        wildcard_constraints:
            param="|".join(scout_tuning.PARAMS),
        params:
            spec=choice_spec,
        priority: 3  # every cell of the setting waits for it
        log:
            f"{RES}/logs/tuning/{{setting}}/{{param}}.log",
        conda:
            CPU_ENV
        shell:
            "scout --log {log} choose-lr --spec {params.spec:q} --out {output}"

    localrules:
        choose_lr,
