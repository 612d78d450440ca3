"""The tracked reference figures of the authors' original code (workflow/references/)."""

import pytest
import yaml

from rankcollapse import references

from conftest import ROOT

D21 = ROOT / "workflow/references/d21_original.yaml"


def test_the_tracked_reference_has_its_provenance_and_the_runs_the_claims_read():
    data = references.load(D21)
    assert len(data["source"]["commit"]) == 40 and data["adaptations"]
    assert "38b5df6" in references.provenance(data)
    for task in ("sorting", "hull"):
        for match in ("ours", "theirs"):
            runs = references.e2_networks(data, task, match)
            assert runs and all(0 < r["majority"] < r["full"] <= 1 for r in runs.values())
    layers = references.e3_layers(data)
    assert set(layers.setup) == {"ln", "ln_mlp", "ln_skip", "ln_skip_mlp"}
    assert set(layers.width) == {32, 128} and layers.groupby("setup").size().min() == 6
    curves = references.e2_curves(data)
    assert set(curves.k) == set(range(7)) and set(curves.samples) == {5, 20}


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("machine"), "missing ['machine']"),
    (lambda d: d["source"].pop("commit"), "source.commit is missing"),
    (lambda d: d["runs"][0].pop("settings_match"), "lacks 'settings_match'"),
])
def test_a_reference_without_its_provenance_or_fields_is_refused(tmp_path, edit, message):
    data = yaml.safe_load(D21.read_text())
    edit(data)
    path = tmp_path / "ref.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(references.ReferenceError, match=message.replace("[", r"\[")):
        references.load(path)
    with pytest.raises(references.ReferenceError, match="cannot read"):
        references.load(tmp_path / "missing.yaml")
