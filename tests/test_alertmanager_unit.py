"""trainwatch.alertmanager on small configs of its own (no amtool, no Alertmanager): each
receiver's webhooks pointed at one URL, the delays given set on the route and dropped from
every sub-route at any depth (and only those), template paths made absolute, each unreadable
config one error naming it, and the written file read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainwatch.alertmanager import (
    TIMINGS,
    AlertmanagerConfigError,
    load_config,
    render_config,
    write_config,
)

URL = "http://127.0.0.1:4321/hook"

CONFIG: dict[str, Any] = {
    "route": {"receiver": "a", "group_wait": "30s", "group_interval": "5m",
              "repeat_interval": "4h", "group_by": ["alertname"],
              "routes": [{"matchers": ["s=x"], "group_wait": "10s", "repeat_interval": "1h",
                          "group_interval": "2m",
                          "routes": [{"matchers": ["t=y"], "repeat_interval": "3h",
                                      "group_wait": "9s", "group_interval": "8m"}]},
                         {"matchers": ["s=z"], "group_interval": "1m"}]},
    "receivers": [
        {"name": "a", "webhook_configs": [{"url": "http://old:1/", "send_resolved": False},
                                          {"url": "http://old:2/", "max_alerts": 3}]},
        {"name": "b", "email_configs": [{"to": "x@example.com"}]},
        {"name": "c", "webhook_configs": []},
    ],
    "templates": ["templates/*.tmpl", "/abs/t.tmpl"],
}


def written(tmp_path: Path, config: Any) -> Path:
    path = tmp_path / "conf" / "am.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def test_every_receivers_webhooks_send_to_the_url_and_one_without_gets_one(
        tmp_path: Path) -> None:
    config = render_config(written(tmp_path, CONFIG), webhook_url=URL)
    assert config["receivers"] == [
        {"name": "a", "webhook_configs": [{"url": URL, "send_resolved": False},
                                          {"url": URL, "max_alerts": 3}]},
        {"name": "b", "email_configs": [{"to": "x@example.com"}],
         "webhook_configs": [{"send_resolved": True, "url": URL}]},
        {"name": "c", "webhook_configs": [{"send_resolved": True, "url": URL}]},
    ]


def test_templates_are_made_absolute_beside_the_config(tmp_path: Path) -> None:
    config = render_config(written(tmp_path, CONFIG), webhook_url=URL)
    assert config["templates"] == [str((tmp_path / "conf/templates/*.tmpl").resolve()),
                                   "/abs/t.tmpl"]
    bare = render_config(written(tmp_path, {"receivers": []}), webhook_url=URL)
    assert bare["templates"] == [] and bare["route"] == {} and bare["receivers"] == []


def test_without_delays_given_the_route_tree_is_kept_whole(tmp_path: Path) -> None:
    config = render_config(written(tmp_path, CONFIG), webhook_url=URL, group_wait="",
                           repeat_interval=None)
    assert config["route"] == CONFIG["route"]


@pytest.mark.parametrize("given", [
    {"group_wait": "1s"}, {"group_interval": "2s"}, {"repeat_interval": "3s"},
    {"group_wait": "1s", "repeat_interval": "3s"},
    {"group_wait": "1s", "group_interval": "2s", "repeat_interval": "3s"}])
def test_each_delay_given_is_set_on_the_route_and_dropped_below_it_the_others_kept(
        tmp_path: Path, given: dict[str, str]) -> None:
    config = render_config(written(tmp_path, CONFIG), webhook_url=URL, **given)
    route = config["route"]
    for key in TIMINGS:
        assert route[key] == given.get(key, CONFIG["route"][key])
    first, second = route["routes"]
    deeper = first["routes"][0]
    for key in TIMINGS:
        for sub, source in ((first, CONFIG["route"]["routes"][0]),
                            (second, CONFIG["route"]["routes"][1]),
                            (deeper, CONFIG["route"]["routes"][0]["routes"][0])):
            if key in given:
                assert key not in sub
            else:
                assert sub.get(key) == source.get(key)
    assert route["group_by"] == ["alertname"] and deeper["matchers"] == ["t=y"]


def test_delays_set_on_a_config_without_a_route_make_one(tmp_path: Path) -> None:
    config = render_config(written(tmp_path, {"receivers": []}), webhook_url=URL,
                           group_interval="7s")
    assert config["route"] == {"group_interval": "7s"}
    assert TIMINGS == ("group_wait", "group_interval", "repeat_interval")


@pytest.mark.parametrize("text", ["route: {}\n", "receivers: {}\n", "- receivers\n", "", "5\n",
                                  "receivers: null\n"])
def test_a_config_without_a_list_of_receivers_is_refused_naming_it(
        tmp_path: Path, text: str) -> None:
    path = tmp_path / "am.yml"
    path.write_text(text)
    with pytest.raises(AlertmanagerConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: `receivers` is missing or not a list"


def test_a_config_that_cannot_be_read_or_parsed_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(AlertmanagerConfigError, match=f"^{tmp_path / 'none.yml'}: cannot read "
                       "the Alertmanager config: .*No such file"):
        load_config(tmp_path / "none.yml")
    (tmp_path / "bad.yml").write_text("receivers: [\n")
    with pytest.raises(AlertmanagerConfigError, match=f"^{tmp_path / 'bad.yml'}: cannot read "
                       "the Alertmanager config: "):
        load_config(tmp_path / "bad.yml")
    assert load_config(written(tmp_path, CONFIG)) == CONFIG


def test_write_config_makes_the_directory_and_keeps_the_order(tmp_path: Path) -> None:
    config = {"route": {"receiver": "a"}, "receivers": [{"name": "a"}], "global": {}}
    target = tmp_path / "new" / "dir" / "am.yml"
    assert write_config(config, target) == target
    assert yaml.safe_load(target.read_text()) == config
    assert target.read_text().splitlines()[0] == "route:"
    assert write_config(config, target) == target  # the directory there already


def test_the_source_may_be_named_and_everything_after_it_must_be(tmp_path: Path) -> None:
    path = written(tmp_path, {"receivers": []})
    assert render_config(source=path, webhook_url=URL)["receivers"] == []
    with pytest.raises(TypeError):
        render_config(path, URL)  # type: ignore[misc]
