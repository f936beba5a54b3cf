"""``task.files: [hf:NAME]`` (issue 15 §3): a Hugging Face dataset by name, loaded offline.

The dataset is cached the way a user's machine caches one: an earlier ``datasets.load_dataset`` (of a
local directory here, so nothing is downloaded) writes its arrow files under the datasets cache,
which this test points at its tmp_path."""
import json

import pytest

from arch_zoo.data.prepare import prepare
from arch_zoo.data.sources import resolve
from arch_zoo.data.tasks import TASKS
from arch_zoo.errors import ConfigError

from .test_store import text

datasets = pytest.importorskip("datasets")


def options(**kw):
    return TASKS.parse({"name": "char_lm", "max_chars": None, "tokenizer": "char", **kw}, "task").options


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """'tiny_docs' (train: 40 rows, every fifth blank; test: 10 rows) loaded once into a fresh cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    src = tmp_path / "src" / "tiny_docs"
    src.mkdir(parents=True)
    rows = {"train": [text(3, seed=i) if i % 5 else "" for i in range(40)],
            "test": [f"TEST ROW {i}\n" for i in range(10)]}
    for split, texts in rows.items():
        (src / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    datasets.load_dataset(str(src))  # the earlier load that cached it
    return rows


def test_hf_name_loads_a_cached_dataset_offline_and_reads_its_train_split(cached, tmp_path):
    """README: `hf:NAME[:CONFIG]`, "a dataset this machine has cached (loaded offline; nothing is
    downloaded)": the store holds exactly the train split's rows (not the cached test split), the
    source is that split's arrow file, and the offline switch is put back afterwards."""
    before = datasets.config.HF_HUB_OFFLINE
    store = prepare(options(files=["hf:tiny_docs"]), tmp_path / "cache")
    body = "".join(cached["train"])
    tok, a = store.tokenizer, int(0.9 * len(body))
    assert store.manifest["chars"] == len(body)
    assert store.split("train").read(0, len(store.split("train"))).tolist() == tok.encode(body[:a])
    assert [s["path"].rsplit("/", 1)[1] for s in store.manifest["sources"]] == ["tiny_docs-train.arrow"]
    assert datasets.config.HF_HUB_OFFLINE == before
    again = prepare(options(files=["hf:tiny_docs:default"], split_by="documents"), tmp_path / "cache")
    assert sum(again.manifest["splits"][s]["documents"] for s in ("train", "val", "test")) == 32  # blank rows: none


@pytest.mark.parametrize("name", ["no_such_dataset", "tiny_docs:no_such_config"])
def test_an_unloadable_hf_name_is_one_line_naming_it(cached, name):
    """README: a name this machine cannot load without a download is one line naming the entry."""
    with pytest.raises(ConfigError) as err:
        resolve([f"hf:{name}"])
    msg = str(err.value)
    assert msg.startswith(f"task.files[0]: hf:{name} cannot be loaded on this machine without a download")
    assert "\n" not in msg
