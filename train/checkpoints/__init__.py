"""What a run keeps on disk (local or gs://): checkpoints verified on restore
(checkpointing.py), the state's save and restore (state_checkpoint.py) and its
sharding layout (state_layout.py), the workdir's lock and config (workdir.py),
step-0 sharing between runs (init_from.py), object storage (object_store.py) and a
player's export to a Hugging Face directory (export.py)."""
