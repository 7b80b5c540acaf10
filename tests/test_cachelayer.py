"""fitness/candidate/cachelayer.py: a candidate child's Triton cache reads through to the shared cache
and writes only into its private folder. (Inside a real sandboxed child: tests/test_pool.py.)"""
import json

import pytest
from triton.runtime.cache import _base32, get_cache_manager, get_override_manager

from fitness.candidate.cachelayer import SHARED_ENV, ReadThroughCache

KEY = _base32("ab12")


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """(private, shared): the child's own cache folder and the one the clean children wrote."""
    private, shared = tmp_path / "private", tmp_path / "shared"
    (shared / KEY).mkdir(parents=True)
    private.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
    monkeypatch.setenv(SHARED_ENV, str(shared))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    return private, shared


def test_a_file_only_the_shared_cache_holds_is_read_from_there(caches):
    private, shared = caches
    (shared / KEY / "launcher.so").write_bytes(b"built by a clean child")
    m = ReadThroughCache(KEY)
    assert m.has_file("launcher.so")
    assert m.get_file("launcher.so") == str(shared / KEY / "launcher.so")
    assert m.cache_dir == str(private / KEY)  # its own folder is still where it writes


def test_a_file_the_child_holds_itself_wins_over_the_shared_one(caches):
    private, shared = caches
    (shared / KEY / "k.json").write_text("theirs")
    m = ReadThroughCache(KEY)
    (private / KEY / "k.json").write_text("mine")
    assert m.get_file("k.json") == str(private / KEY / "k.json")


def test_what_a_candidate_child_writes_lands_in_its_private_folder_even_over_a_shared_file(caches):
    private, shared = caches
    (shared / KEY / "k.bin").write_bytes(b"theirs")
    m = ReadThroughCache(KEY)
    assert m.put(b"mine", "k.bin") == str(private / KEY / "k.bin")
    assert (shared / KEY / "k.bin").read_bytes() == b"theirs"
    assert sorted(p.name for p in (shared / KEY).iterdir()) == ["k.bin"]  # no temporary folder left there either
    assert open(m.get_file("k.bin"), "rb").read() == b"mine"  # from now on its own copy is read
    assert m.put("text", "new.txt", binary=False) == str(private / KEY / "new.txt")
    assert not (shared / KEY / "new.txt").exists()


def test_a_file_neither_cache_holds_is_missing_and_named_in_the_private_folder(caches):
    private, _ = caches
    m = ReadThroughCache(KEY)
    assert m.get_file("nothing.json") is None and not m.has_file("nothing.json")
    assert m._make_path("nothing.json") == str(private / KEY / "nothing.json")


def test_a_shared_folder_of_another_key_is_not_read(caches):
    _, shared = caches
    other = _base32("cd34")
    (shared / other).mkdir()
    (shared / other / "launcher.so").write_bytes(b"another kernel's")
    assert ReadThroughCache(KEY).get_file("launcher.so") is None


def test_without_a_shared_cache_it_is_tritons_own_file_cache(caches, monkeypatch):
    private, shared = caches
    (shared / KEY / "launcher.so").write_bytes(b"x")
    monkeypatch.setenv(SHARED_ENV, "")
    m = ReadThroughCache(KEY)
    assert m.shared_dir == "" and m.get_file("launcher.so") is None
    monkeypatch.delenv(SHARED_ENV)
    assert ReadThroughCache(KEY).get_file("launcher.so") is None


@pytest.mark.parametrize("which", ["override", "dump"])
def test_the_override_and_dump_folders_never_read_through(caches, monkeypatch, tmp_path, which):
    _, shared = caches
    (shared / KEY / "launcher.so").write_bytes(b"x")
    monkeypatch.setenv("TRITON_OVERRIDE_DIR", str(tmp_path / "override"))
    monkeypatch.setenv("TRITON_DUMP_DIR", str(tmp_path / "dump"))
    m = ReadThroughCache(KEY, **{which: True})
    assert m.shared_dir == "" and m.get_file("launcher.so") is None


def test_a_group_the_clean_children_wrote_is_found_with_its_members(caches):
    _, shared = caches
    members = {name: str(shared / KEY / name) for name in ("k.cubin", "k.json")}
    for path in members.values():
        open(path, "w").write("x")
    (shared / KEY / "__grp__k.json").write_text(json.dumps({"child_paths": members}))
    assert ReadThroughCache(KEY).get_group("k.json") == members


def test_a_group_the_candidate_child_puts_names_the_shared_members_and_lands_privately(caches):
    private, shared = caches
    (shared / KEY / "k.cubin").write_bytes(b"theirs")
    m = ReadThroughCache(KEY)
    member = m.get_file("k.cubin")
    grp = m.put_group("k.json", {"k.cubin": member})
    assert grp == str(private / KEY / "__grp__k.json") and not (shared / KEY / "__grp__k.json").exists()
    assert m.get_group("k.json") == {"k.cubin": str(shared / KEY / "k.cubin")}


def test_triton_uses_it_when_named_as_its_cache_manager_the_way_a_candidate_child_is_set_up(caches, monkeypatch):
    private, shared = caches
    (shared / KEY / "entry.txt").write_text("built by a clean child")
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "fitness.candidate.cachelayer:ReadThroughCache")
    m = get_cache_manager("ab12")
    assert isinstance(m, ReadThroughCache)
    assert open(m.get_file("entry.txt")).read() == "built by a clean child"
    m.put(b"mine", "new.bin")
    assert (private / KEY / "new.bin").read_bytes() == b"mine" and not (shared / KEY / "new.bin").exists()
    monkeypatch.setenv("TRITON_OVERRIDE_DIR", str(private.parent / "override"))
    assert get_override_manager("ab12").get_file("entry.txt") is None
