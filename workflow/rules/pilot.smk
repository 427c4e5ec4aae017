# The calibration pilot (scout.cost; docs/real-models.md): a few steps of each distinct training
# shape (setting x variant), each as the grid's own training job with that shape's resources, so
# that scout plan can say what the grid is expected to take on these machines:
#   snakemake pilot [--profile profiles/slurm]; then scout plan


rule pilot:
    input:
        pilot_files(),
    localrule: True


rule pilot_train:
    input:
        pilot_inputs,
        preflight_files(),
    output:
        f"{RES}/pilot/{{setting}}/{{variant}}/train.json",
    log:
        f"{RES}/logs/pilot/{{setting}}/{{variant}}.log",
    benchmark:
        f"{RES}/pilot/{{setting}}/{{variant}}/benchmark.tsv"
    conda:
        TRAIN_ENV
    threads: cluster_threads("pilot")
    resources:
        **cluster_resources("pilot"),
    params:
        spec=pilot_spec,
        out=folder_of(),
        launch=launcher("pilot"),
    shell:
        "{params.launch} scout --log {log} train --spec {params.spec:q} --out {params.out}"
