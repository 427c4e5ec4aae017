# The embedded toy world: synthetic data, a tokenizer, and tiny models trained from scratch.
if TOY:

    rule toy_data:
        output:
            expand(
                f"{RES}/toy/data/{{name}}.jsonl",
                name=[*config["toy"]["splits"], *config["benchmarks"], *config["toy"].get("validation", {})],
            ),
        log:
            f"{RES}/logs/toy/data.log",
        conda:
            CPU_ENV
        threads: cluster_threads("toy")
        resources:
            **cluster_resources("toy"),
        params:
            spec=job_spec("toy/data", {"toy": config["toy"], "benchmarks": config["benchmarks"]}),
            out=folder_of(),
        shell:
            "scout --log {log} toy-data --spec {params.spec:q} --out {params.out}"

    rule toy_tokenizer:
        output:
            f"{RES}/toy/tokenizer/tokenizer.json",
        log:
            f"{RES}/logs/toy/tokenizer.log",
        conda:
            CPU_ENV
        threads: cluster_threads("toy")
        resources:
            **cluster_resources("toy"),
        params:
            out=folder_of(),
        shell:
            "scout --log {log} toy-tokenizer --out {params.out}"

    rule toy_pretrain:
        input:
            tokenizer=f"{RES}/toy/tokenizer/tokenizer.json",
            data=[GRID.paths.data(s) for s in config["toy"]["pretrain_mix"]],
        output:
            f"{RES}/toy/models/{{model}}/model.safetensors",
        log:
            f"{RES}/logs/toy/pretrain-{{model}}.log",
        benchmark:
            f"{RES}/benchmarks/toy_pretrain/{{model}}.tsv"
        conda:
            CPU_ENV
        threads: cluster_threads("toy")
        resources:
            **cluster_resources("toy"),
        params:
            spec=toy_pretrain_spec,
            out=folder_of(),
        shell:
            "scout --log {log} toy-pretrain --spec {params.spec:q} --out {params.out}"
