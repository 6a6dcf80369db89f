"""The arms TOML is checked when it is read (issue 28 finding 9, issue 26 item 3): types,
ranges, booleans as booleans, unknown keys and tables with "did you mean"; every error names
the file, the table and key, the bad value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_quantagent.errors import DataFileError
from pytest_quantagent.quant.arms import load_arms_config, load_user_config

_ARM = "[arms.int4]\nbackend = 'openai'\nmodel = 'm'\nbase_url = 'http://127.0.0.1:9/v1'\n"


@pytest.mark.parametrize("extra,where,problem", [
    # finding 9: "false" used to turn constrained decoding *on*
    ("constrained = 'false'", "arms.int4.constrained", "'false': Input should be a valid boolean"),
    ("logprobs = 1", "arms.int4.logprobs", "valid boolean"),
    # max_connections = 0 used to hang the run
    ("max_connections = 0", "arms.int4.max_connections", "greater than or equal to 1"),
    ("max_connections = 2.5", "arms.int4.max_connections", "valid integer"),
    ("timeout_s = 0", "arms.int4.timeout_s", "number of seconds from 0.001 to 86400"),
    ("timeout_s = -5", "arms.int4.timeout_s", "number of seconds from 0.001 to 86400"),
    ("timeout_s = nan", "arms.int4.timeout_s", "number of seconds from 0.001 to 86400"),
    ("timeout_s = inf", "arms.int4.timeout_s", "number of seconds from 0.001 to 86400"),
    ("timeout_s = 1e-300", "arms.int4.timeout_s", "number of seconds from 0.001 to 86400"),
    ("timeout_s = 'fast'", "arms.int4.timeout_s", "'fast'"),
    ("extra_body = 'x'", "arms.int4.extra_body", "valid dictionary"),
    ("http_client = 'curl'", "arms.int4.http_client", "'auto', 'native' or 'httpx'"),
    ("base_ulr = 'http://x/v1'", "arms.int4.base_ulr", "did you mean 'base_url'?"),
    ("strcit = true", "arms.int4.strcit", "unknown key 'strcit' for backend 'openai'"),
    ("max_output_chars = 0", "arms.int4.max_output_chars", "greater than or equal to 1"),
])
def test_bad_arm_option_names_file_table_key_and_value(tmp_path: Path, extra: str, where: str,
                                                       problem: str) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(_ARM + extra + "\n")
    with pytest.raises(DataFileError) as e:
        load_arms_config(cfg)
    assert e.value.location == where, str(e.value)
    assert problem in str(e.value) and str(cfg) in str(e.value)


def test_good_options_pass_typed(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(_ARM + "constrained = false\ntimeout_s = 30\nmax_connections = 4\n"
                   "extra_body = {chat_template_kwargs = {enable_thinking = false}}\n")
    arm = load_arms_config(cfg)["int4"]
    assert arm.options["constrained"] is False and arm.options["max_connections"] == 4


@pytest.mark.parametrize("url", ["127.0.0.1:8000/v1", "ftp://host/v1", "http://", "localhost"])
def test_base_url_without_http_scheme_is_refused(tmp_path: Path, url: str) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(f"[arms.bf16]\nbackend = 'openai'\nmodel = 'm'\nbase_url = '{url}'\n")
    with pytest.raises(DataFileError, match=r"at arms.bf16.base_url: .* is not an http:// or https:// URL"):
        load_arms_config(cfg)


def test_url_credentials_never_in_the_error(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text("[arms.bf16]\nbackend = 'openai'\nmodel = 'm'\nbase_url = 'x://bob:s3cr3t-key@h'\n")
    with pytest.raises(DataFileError) as e:
        load_arms_config(cfg)
    assert "s3cr3t-key" not in str(e.value)


def test_unknown_top_level_table_did_you_mean(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(_ARM + "[usr]\nbackend = 'mock'\n")
    with pytest.raises(DataFileError, match=r"at usr: unknown table or key \[usr\]; did you mean 'user'\? "
                       r"\(allowed top-level tables: \[arms\], \[user\], \[judge\]\)"):
        load_arms_config(cfg)


def test_user_and_judge_tables_are_validated_alike(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(_ARM + "[judge]\nbackend = 'openai'\nmodel = 'j'\nbase_url = 'http://h:1/v1'\n"
                   "temperature = 0.0\nmax_tokens = 64\n")
    judge = load_user_config(cfg, "judge")
    assert judge is not None and judge.arm.model == "j" and judge.max_tokens == 64
    cfg.write_text(_ARM + "[judge]\nbackend = 'openai'\nmodel = 'j'\nbase_url = 'http://h:1/v1'\n"
                   "temprature = 0.5\n")
    # A bad [judge] table stops even a run that only reads the arms.
    with pytest.raises(DataFileError, match=r"at judge.temprature: .*did you mean 'temperature'\?"):
        load_arms_config(cfg)
    cfg.write_text(_ARM + "[user]\nbackend = 'openai'\nmodel = 'u'\nbase_url = 'http://h:1/v1'\n"
                   "max_tokens = true\n")
    with pytest.raises(DataFileError, match=r"at user.max_tokens: must be an integer >= 1, got True"):
        load_user_config(cfg)
