# Real datasets and benchmarks of the paper world, turned into local JSONL in the common schema.
if not TOY:

    rule prepare_data:
        output:
            f"{RES}/data/{{dataset}}.jsonl",
        params:
            spec=lambda wc: as_json(
                {"name": wc.dataset, **(config.get("datasets", {}).get(wc.dataset) or config["benchmarks"][wc.dataset])}
            ),
        log:
            f"{RES}/logs/data/{{dataset}}.log",
        shell:
            "scout prepare-data --spec {params.spec:q} --out {output} > {log} 2>&1"
