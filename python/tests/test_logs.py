

def test_config_file_sets_flags_and_the_command_line_wins(tmp_path: Path) -> None:
    config = tmp_path / "tomus.toml"
    config.write_text(
        "[global]\nlog_format = \\"json\\"\n"
        "[manager]\n"
        f"data = \\"{tmp_path / 'from-file'}\\"\n"
        "http-addr = \\"127.0.0.1:1\\"\n"
        "no_gc = true\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "tomus", "--config", str(config), "config", "show", "manager",
         "--http-addr", "127.0.0.1:2"],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    shown = r.stdout.decode()
    assert f'data = "{tmp_path / "from-file"}"  # file' in shown
    assert 'http-addr = "127.0.0.1:2"  # command line' in shown
    assert "no-gc = true  # file" in shown
    assert 'log-format = "json"  # file' in shown
    assert "writer-lease-ms = 10000  # default" in shown
    assert "# secret-file (not set)" in shown
    # The server runs with it: its state goes where the file says, its logs are JSON.
    log = tmp_path / "manager.log"
    proc = start(["--config", str(config), "--addr", "127.0.0.1:0", "manager",
                  "--http-addr", "127.0.0.1:0"], log)
    try:
        wait_listening(proc, log)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert (tmp_path / "from-file").is_dir()
    assert json_lines(log.read_text())
    config.write_text("[manager]\nno_such_flag = 1\n")
    r = subprocess.run(
        [sys.executable, "-m", "tomus", "--config", str(config), "manager"],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode != 0 and b"--no-such-flag" in r.stderr
