from services.cli.logs_cmd import parse_cri_log_line, render


def test_cri_log_format(tmp_path):
    log = tmp_path / "0.log"
    log.write_text(
        "2026-01-01T00:00:00.000000001Z stdout F hello\n"
        "2026-01-01T00:00:00.000000002Z stderr P part one \n"
        "2026-01-01T00:00:00.000000003Z stderr F and two\n"
        "garbage line\n"
        "2026-01-01T00:00:00.000000004Z stdout F \n")
    assert render(log, None) == "hello\npart one and two\n\n"
    assert render(log, 1) == "\n"
    assert parse_cri_log_line("x y") is None
