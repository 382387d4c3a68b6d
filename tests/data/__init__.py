from tests.conftest import DATA_DIR


def shipped_raw(name: str, stage: str, unwrap: str) -> dict:
    """The dataset entry of a shipped SK²Decompile raw example file (config.yaml's pseudo2norm_examples and
    norm2code_examples read the same way), for ingest_dataset."""
    return {
        "path": str(DATA_DIR / "sk2decompile" / f"{name}.jsonl"),
        "shape": "raw",
        "stage": stage,
        "unwrap": unwrap,
        "fields": {"input": "input", "target": "output", "header": None, "id": None},
    }
