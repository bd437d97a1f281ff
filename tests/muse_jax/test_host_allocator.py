"""muse_jax.host_allocator: when `muse-wm` restarts itself under glibc's 2 MiB pages, and that the restart is the
same command in the same process, done once."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from muse_jax import host_allocator as H

LINUX = ("Linux", ("glibc", "2.36"), "madvise")


def test_the_restart_adds_the_tunable_once_and_keeps_every_other_setting():
    env = H.huge_pages_environment({"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, *LINUX)
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1" and env["PATH"] == "/bin"
    assert H.huge_pages_environment({}, *LINUX)["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    assert H.huge_pages_environment(env, *LINUX) is None  # the restarted process does not restart again


@pytest.mark.parametrize("environ, system, libc, thp", [
    ({"MUSE_JAX_HUGE_PAGES": "0"}, *LINUX),                      # turned off
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, *LINUX),      # the user chose
    ({H.RESTARTED: "1"}, *LINUX),                                # the loader dropped the tunable: no loop
    ({}, "Darwin", ("", ""), None),
    ({}, "Linux", ("glibc", "2.31"), "madvise"),                 # glibc before 2.35 ignores the tunable
    ({}, "Linux", ("", ""), "madvise"),                          # musl
    ({}, "Linux", ("glibc", "2.36"), "never"),
    ({}, "Linux", ("glibc", "2.36"), None),
])
def test_no_restart_where_it_would_change_nothing(environ, system, libc, thp):
    assert H.huge_pages_environment(environ, system, libc, thp) is None


def test_the_kernels_mode_is_the_bracketed_word(tmp_path):
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    assert H.thp_mode(tmp_path / "enabled") == "madvise"
    (tmp_path / "enabled").write_text("garbage")
    assert H.thp_mode(tmp_path / "enabled") is None
    assert H.thp_mode(tmp_path / "missing") is None


@pytest.mark.skipif(H.huge_pages_environment({k: v for k, v in os.environ.items() if k not in (
    "GLIBC_TUNABLES", "MUSE_JAX_HUGE_PAGES", H.RESTARTED)}, platform.system(), platform.libc_ver(),
    H.thp_mode()) is None, reason="this machine has no 2 MiB pages for glibc (see huge_pages_environment)")
def test_the_process_restarts_itself_once_with_the_same_command_and_pid():
    code = ("import os, sys; print('start', os.getpid(), sys.argv[1:], flush=True); "
            "from muse_jax.host_allocator import restart_with_huge_pages; restart_with_huge_pages(); "
            "print('after', os.getpid(), os.environ.get('GLIBC_TUNABLES'))")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "MUSE_JAX_HUGE_PAGES", H.RESTARTED)}
    out = subprocess.run([sys.executable, "-c", code, "x", "--y"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    pid = lines[0].split()[1]
    assert lines == [f"start {pid} ['x', '--y']"] * 2 + [f"after {pid} glibc.malloc.hugetlb=1"]
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "MUSE_JAX_HUGE_PAGES": "0"})
    assert [line.split()[0] for line in off.stdout.splitlines()] == ["start", "after"]


def test_the_command_restarts_before_its_run_and_a_call_from_python_does_not(monkeypatch, tmp_path, capsys):
    from muse_jax import cli

    asked = []
    monkeypatch.setattr(H, "restart_with_huge_pages", lambda: asked.append(sys.argv[1]))
    bad = ["--config", "no-such-config", "--logdir", str(tmp_path / "run")]
    assert cli.main(["pretrain", *bad]) == 2 and asked == []          # a call from Python: never
    monkeypatch.setattr(sys, "argv", ["muse-wm", "pretrain", *bad])
    assert cli.main() == 2 and asked == ["pretrain"]                  # the command: before the config is read
    assert "no-such-config" in capsys.readouterr().err
