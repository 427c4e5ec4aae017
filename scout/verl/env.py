"""What the driver tells every Ray process of a cell's job, through its environment: verl starts
those processes itself, so the plugin's registered losses, the LoRA sync and the agent loops read
the cell's method and its settings from there; and the folder names the driver and the trainer both
use. Names only, so reading one registers nothing."""

METHOD_ENV = "SCOUT_METHOD"  # the cell's method id, for the advantage a method row names
METHOD_CFG_ENV = "SCOUT_METHOD_CFG"  # the cell's method_cfg, as JSON
TEACHER_DIR = "teacher_actor"  # SCOUT's trained teacher, beside verl's actor/ in global_step_N/
SYNC_CHECKSUM_ENV = "SCOUT_SYNC_CHECKSUM"  # "1": both ends of a teacher weight sync log their checksum
SYNC_CHECKSUM_ENGINE = "nccl_checked"  # verl's nccl engine with those checksums (scout.verl.sync_checksum)
