# Evaluation: one job per checkpoint, covering every benchmark of the setting's domain.
if settings_of("math"):

    rule evaluate_math:
        input:
            eval_inputs,
        output:
            # update: a record stays in place while its job reruns, and comes back if the job fails
            [update(f) for f in eval_outputs("math")],
        log:
            f"{RES}/logs/eval/{{setting}}/{{variant}}/s{{seed}}/{{ckpt}}.log",
        benchmark:
            f"{RES}/benchmarks/evaluate_math/{{setting}}/{{variant}}/s{{seed}}/{{ckpt}}.tsv"
        wildcard_constraints:
            setting=_alternatives(settings_of("math")),
        conda:
            EVAL_ENV
        threads: cluster_threads("evaluate")
        resources:
            **cluster_resources("evaluate"),
        params:
            spec=eval_spec,
            out=folder_of(),
        shell:
            "scout --log {log} evaluate --spec {params.spec:q} --out {params.out}"


if settings_of("code"):

    rule evaluate_code:
        input:
            eval_inputs,
        output:
            [update(f) for f in eval_outputs("code")],
        log:
            f"{RES}/logs/eval/{{setting}}/{{variant}}/s{{seed}}/{{ckpt}}.log",
        benchmark:
            f"{RES}/benchmarks/evaluate_code/{{setting}}/{{variant}}/s{{seed}}/{{ckpt}}.tsv"
        wildcard_constraints:
            setting=_alternatives(settings_of("code")),
        conda:
            EVAL_ENV
        threads: cluster_threads("evaluate")
        resources:
            **cluster_resources("evaluate"),
        params:
            spec=eval_spec,
            out=folder_of(),
        shell:
            "scout --log {log} evaluate --spec {params.spec:q} --out {params.out}"
