# The embedded toy world: synthetic data, a tokenizer, and tiny models trained from scratch.
if TOY:

    rule toy_data:
        output:
            expand(
                f"{RES}/toy/data/{{name}}.jsonl",
                name=[*config["toy"]["splits"], *config["benchmarks"], *config["toy"].get("validation", {})],
            ),
        params:
            spec=job_spec("toy/data", {"toy": config["toy"], "benchmarks": config["benchmarks"]}),
            out=folder_of(),
        log:
            f"{RES}/logs/toy/data.log",
        threads: cluster_threads("toy")
        resources:
            **cluster_resources("toy"),
        conda:
            CPU_ENV
        shell:
            "scout --log {log} toy-data --spec {params.spec:q} --out {params.out}"

    rule toy_tokenizer:
        output:
            f"{RES}/toy/tokenizer/tokenizer.json",
        params:
            out=folder_of(),
        log:
            f"{RES}/logs/toy/tokenizer.log",
        threads: cluster_threads("toy")
        resources:
            **cluster_resources("toy"),
        conda:
            CPU_ENV
        shell:
            "scout --log {log} toy-tokenizer --out {params.out}"

    rule toy_pretrain:
        input:
            tokenizer=f"{RES}/toy/tokenizer/tokenizer.json",
            data=[grid.data_path(config, s) for s in config["toy"]["pretrain_mix"]],
        output:
            f"{RES}/toy/models/{{model}}/model.safetensors",
        params:
            spec=toy_pretrain_spec,
            out=folder_of(),
        log:
            f"{RES}/logs/toy/pretrain-{{model}}.log",
        benchmark:
            f"{RES}/benchmarks/toy_pretrain/{{model}}.tsv"
        threads: cluster_threads("toy")
        resources:
            **cluster_resources("toy"),
        conda:
            CPU_ENV
        shell:
            "scout --log {log} toy-pretrain --spec {params.spec:q} --out {params.out}"
