# Training: one job per cell (setting x variant x seed), plus teacher preparation.


rule prepare_teacher:
    input:
        teacher_inputs,
    output:
        f"{RES}/teachers/{{model}}/train.json",
    params:
        spec=teacher_spec,
        out=f"{RES}/teachers/{{model}}",
    log:
        f"{RES}/logs/teachers/{{model}}.log",
    shell:
        "scout train --spec {params.spec:q} --out {params.out} > {log} 2>&1"


rule train:
    input:
        train_inputs,
    output:
        f"{RES}/train/{{setting}}/{{variant}}/s{{seed}}/train.json",
    params:
        spec=train_spec,
        out=f"{RES}/train/{{setting}}/{{variant}}/s{{seed}}",
    log:
        f"{RES}/logs/train/{{setting}}/{{variant}}/s{{seed}}.log",
    shell:
        "scout train --spec {params.spec:q} --out {params.out} > {log} 2>&1"
