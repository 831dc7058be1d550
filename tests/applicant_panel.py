"""The report's applicant panel loaded in V8 (mini-racer), for the tests that compare it
with ``govern explain-row``."""

import json
import re

import pandas as pd
from py_mini_racer import MiniRacer

_SCRIPTS = re.compile(r"<script([^>]*)>(.*?)</script>", re.DOTALL)


def panel(html: str):
    """The page's two scripts loaded in V8: a function following one row (column ->
    value, NaN for missing; or the text a reviewer pastes) to the script's answer, or
    ``{"error": message}``."""
    scripts = _SCRIPTS.findall(html)
    assert [attributes for attributes, _ in scripts] == [
        ' type="application/json" id="applicant-model"',
        "",
    ]
    engine = MiniRacer()
    engine.eval(scripts[1][1])
    engine.eval(f"var MODEL = JSON.parse({json.dumps(scripts[0][1])});")

    def follow(values) -> dict:
        if isinstance(values, str):  # pasted text, read by the script
            given = f"ApplicantPanel.parseRow({json.dumps(values)})"
        else:
            given = json.dumps({k: "" if pd.isna(v) else str(v) for k, v in values.items()})
        answer = (  # the script's refusal as {"error": its message}
            f"(() => {{ try {{ return JSON.stringify(ApplicantPanel.follow(MODEL, {given})); }} "
            "catch (error) { return JSON.stringify({error: error.message}); } })()"
        )
        return json.loads(engine.eval(answer))

    return follow
