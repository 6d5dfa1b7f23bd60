"""The shipped Alertmanager config, rendered for somewhere else: a local receiver, short timings.

prometheus/alertmanager/alertmanager.yml is the one config; `make demo` and the end-to-end test
load it and replace what differs (every receiver's URL, the grouping delays), the way the rules
are rendered with short windows by the generator's overrides, never from an edited copy.

Example:
    >>> from pathlib import Path
    >>> src = Path(__file__).parent.parent / "prometheus" / "alertmanager" / "alertmanager.yml"
    >>> cfg = render_config(src, webhook_url="http://127.0.0.1:8080/hook", group_wait="1s")
    >>> {c["url"] for r in cfg["receivers"] for c in r["webhook_configs"]}
    {'http://127.0.0.1:8080/hook'}
    >>> cfg["route"]["group_wait"], Path(cfg["templates"][0]).is_absolute()
    ('1s', True)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# The route's delays; an overridden one is removed from sub-routes, so it holds there too.
TIMINGS = ("group_wait", "group_interval", "repeat_interval")


class AlertmanagerConfigError(ValueError):
    """The config file cannot be read or has no receivers to point elsewhere."""


def load_config(source: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(source.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise AlertmanagerConfigError(f"{source}: cannot read the Alertmanager config: {err}") \
            from None
    if not isinstance(doc, dict) or not isinstance(doc.get("receivers"), list):
        raise AlertmanagerConfigError(f"{source}: `receivers` is missing or not a list")
    return doc


def _drop(routes: list[dict[str, Any]], keys: list[str]) -> None:
    for route in routes:
        for key in keys:
            route.pop(key, None)
        _drop(route.get("routes", []), keys)


def render_config(source: Path, *, webhook_url: str, group_wait: str | None = None,
                  group_interval: str | None = None,
                  repeat_interval: str | None = None) -> dict[str, Any]:
    """``source`` with every webhook receiver sending to ``webhook_url`` and the given delays
    on the whole route tree; template paths made absolute, so the result can be written
    anywhere. A receiver without a webhook gets one (its other integrations are kept)."""
    config = load_config(source)
    for receiver in config["receivers"]:
        hooks = receiver.get("webhook_configs") or [{"send_resolved": True}]
        receiver["webhook_configs"] = [{**hook, "url": webhook_url} for hook in hooks]
    config["templates"] = [str((source.parent / t).resolve()) for t in config.get("templates", [])]
    given = {key: value for key, value in zip(TIMINGS, (group_wait, group_interval,
                                                         repeat_interval)) if value}
    route = config.setdefault("route", {})
    _drop(route.get("routes", []), list(given))
    route.update(given)
    return config


def write_config(config: dict[str, Any], target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return target
