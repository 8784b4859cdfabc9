"""Column identity end to end (issue 40): a model knows the columns it was fitted
on, and new data is matched to them by name, or refused naming the columns.

Through the command line (click's CliRunner): ``mbkkm fit`` records the header
names (``feature_names_in_``) and its ``--columns`` / ``--drop`` choice in the
saved model; ``mbkkm predict`` finds the columns by name in any order, replays
the choice, refuses (exit 2) a missing or an extra column with its name, and
warns when names are on one side only. Through the API: scikit-learn's rules
(``feature_names_in_``, refusal of other names, the one-sided warnings), for the
three estimators. And missing values are reported as missing, with their row
and column.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.cli import COLUMN_CHOICE, load_model, main

FEATURES = ["x", "y", "z"]
#: Three clusters that a permutation of the columns maps onto each other: data read
#: with its columns in another order gets other labels.
CENTERS = np.array([[0.0, 0.0, 6.0], [6.0, 0.0, 0.0], [0.0, 6.0, 0.0]])


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.delenv("MBKKM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def frame():
    """An id, three features, a label: 90 rows, 30 in each of CENTERS' clusters."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.5, size=(30, 3)) for c in CENTERS])
    df = pd.DataFrame(X, columns=FEATURES)
    df.insert(0, "id", np.arange(len(df)))
    df["label"] = np.repeat([0, 1, 2], 30)
    return df


def _write(df, path):
    if path.suffix == ".parquet":
        df.to_parquet(path)
    elif path.suffix == ".feather":
        df.reset_index(drop=True).to_feather(path)
    elif path.suffix == ".npy":
        np.save(path, df.to_numpy())
    else:
        df.to_csv(path, index=False, header=path.suffix != ".txt")
    return path


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in r.output, r.output
    return r


def _fit(data, tmp_path, *opts):
    """``mbkkm fit`` (fixed width, few iterations): the model file and the labels."""
    model, labels = tmp_path / "m.skops", tmp_path / "fit-labels.txt"
    r = _cli(
        "fit",
        data,
        "-k",
        3,
        "--gamma",
        0.1,
        "--batch-size",
        32,
        "--tau",
        20,
        "--max-iter",
        20,
        "--seed",
        0,
        "--model-out",
        model,
        "--labels-out",
        labels,
        "-q",
        *opts,
    )
    assert r.exit_code == 0, r.output
    return model, np.loadtxt(labels, dtype=int)


def _predict(model, data, tmp_path, *opts, code=0):
    out = tmp_path / "labels.txt"
    out.unlink(missing_ok=True)
    r = _cli("predict", model, data, "--labels-out", out, "-q", *opts)
    assert r.exit_code == code, r.output
    return r, (np.loadtxt(out, dtype=int) if code == 0 else None)


def _needs(suffix):
    if suffix in (".parquet", ".feather"):
        pytest.importorskip("pyarrow")


# ------------------------------------------------------------------ the CLI
@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".feather"])
def test_predict_finds_the_columns_by_name(frame, tmp_path, suffix):
    _needs(suffix)
    data = _write(frame, tmp_path / f"d{suffix}")
    model, fitted = _fit(data, tmp_path, "--drop", "id,label")
    assert len(np.unique(fitted)) == 3
    est = load_model(model)  # the round trip keeps the names and the choice
    np.testing.assert_array_equal(est.feature_names_in_, FEATURES)
    assert est.n_features_in_ == 3
    assert getattr(est, COLUMN_CHOICE)["left_out"] == ["id", "label"]
    # the columns taken by position from the reversed file would give other labels
    # (so the tests below can fail)
    X = frame[FEATURES].to_numpy(np.float32)
    assert (est.predict(pd.DataFrame(X[:, ::-1], columns=FEATURES)) != fitted).any()
    for name, df in [
        ("same", frame),  # --drop id,label replayed
        ("features-reversed", frame[FEATURES[::-1]]),  # no id, no label: nothing to drop
        ("all-shuffled", frame[["z", "label", "x", "id", "y"]]),
    ]:
        new = _write(df, tmp_path / f"{name}{suffix}")
        r, labels = _predict(model, new, tmp_path)
        np.testing.assert_array_equal(labels, fitted, err_msg=name)
        assert "Warning" not in r.output, name


def test_predict_refuses_missing_and_extra_columns(frame, tmp_path):
    model, _ = _fit(_write(frame, tmp_path / "d.csv"), tmp_path, "--drop", "id,label")
    cases = [
        (frame[["id", "x", "z"]], ["lacks the column the model was fitted on: 'y'"]),
        (frame.assign(w=1.0), ["has the column the model was not fitted on: 'w'", "--drop w"]),
        (
            frame.rename(columns={"y": "Y"}),
            [
                "lacks the column the model was fitted on: 'y'",
                "has the column the model was not fitted on: 'Y'",
            ],
        ),
    ]
    for df, expected in cases:
        new = _write(df, tmp_path / "new.csv")
        r, _ = _predict(model, new, tmp_path, code=2)
        for text in expected:
            assert text in r.output, r.output
        assert "The model expects 'x', 'y', 'z', in any order." in r.output
        assert not (tmp_path / "labels.txt").exists()  # refused before any work


def test_predict_options_replace_the_saved_choice(frame, tmp_path):
    model, fitted = _fit(_write(frame, tmp_path / "d.csv"), tmp_path, "--drop", "id,label")
    new = _write(frame.assign(w=1.0)[["w", "z", "y", "x", "id"]], tmp_path / "new.csv")
    r, _ = _predict(model, new, tmp_path, "--drop", "w", code=2)  # id is an extra now
    assert "has the column the model was not fitted on: 'id'" in r.output
    _, labels = _predict(model, new, tmp_path, "--drop", "w,id")
    np.testing.assert_array_equal(labels, fitted)
    _, labels = _predict(model, new, tmp_path, "--columns", "z,x,y")  # any order
    np.testing.assert_array_equal(labels, fitted)


def test_fit_columns_subset_ignores_other_columns_at_predict(frame, tmp_path):
    model, fitted = _fit(_write(frame, tmp_path / "d.csv"), tmp_path, "--columns", "z,x,y")
    est = load_model(model)
    np.testing.assert_array_equal(est.feature_names_in_, ["z", "x", "y"])
    new = _write(frame.assign(w=1.0)[["w", "x", "y", "label", "z"]], tmp_path / "new.csv")
    _, labels = _predict(model, new, tmp_path)
    np.testing.assert_array_equal(labels, fitted)
    r, _ = _predict(model, _write(frame[["x", "y"]], tmp_path / "xy.csv"), tmp_path, code=2)
    assert "lacks the column the model was fitted on: 'z'" in r.output


def test_drop_by_index_replayed_without_a_header(frame, tmp_path):
    data = _write(frame, tmp_path / "d.txt")  # no header: columns by index only
    model, fitted = _fit(data, tmp_path, "--drop", "0,-1")
    assert not hasattr(load_model(model), "feature_names_in_")
    r, labels = _predict(model, data, tmp_path)
    np.testing.assert_array_equal(labels, fitted)
    assert "Warning" not in r.output


def test_names_on_one_side_warn(frame, tmp_path):
    # a model with names, data without: a warning, the columns by position (the
    # fit's choice replayed on a file of the fit's width)
    model, fitted = _fit(_write(frame, tmp_path / "d.csv"), tmp_path, "--drop", "id,label")
    for df, path in ((frame, "all.txt"), (frame[FEATURES], "x.npy")):
        r, labels = _predict(model, _write(df, tmp_path / path), tmp_path)
        assert (
            "Warning: " + str(tmp_path / path) + " has no column names, but the model "
            "was fitted on named columns ('x', 'y', 'z')"
        ) in r.output
        np.testing.assert_array_equal(labels, fitted)
    # a model without names, data with: a warning
    plain, fitted = _fit(_write(frame[FEATURES], tmp_path / "p.npy"), tmp_path)
    r, labels = _predict(plain, _write(frame[FEATURES], tmp_path / "n.csv"), tmp_path)
    assert "has column names, but the model was fitted without" in r.output
    np.testing.assert_array_equal(labels, fitted)


def test_fit_records_no_names_without_a_header(frame, tmp_path):
    model, _ = _fit(_write(frame[FEATURES], tmp_path / "d.npy"), tmp_path)
    est = load_model(model)
    assert not hasattr(est, "feature_names_in_") and est.n_features_in_ == 3
    assert getattr(est, COLUMN_CHOICE)["left_out"] is None


@pytest.mark.parametrize("command", ["fit", "predict"])
@pytest.mark.parametrize(
    "cell, what",
    [("", "missing value ''"), ("NA", "missing value 'NA'"), ("nan", "missing value 'nan'")],
)
def test_missing_cell_named_with_row_and_column(frame, tmp_path, command, cell, what):
    text = frame[FEATURES].to_csv(index=False).splitlines()
    model = None
    if command == "predict":
        model, _ = _fit(_write(frame[FEATURES], tmp_path / "d.csv"), tmp_path)
    x, _, z = text[5].split(",")
    text[5] = ",".join([x, cell, z])  # line 6: data row 5, column 'y'
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(text) + "\n")
    r = (
        _cli("fit", bad, "-k", 3)
        if command == "fit"
        else _cli("predict", model, bad, "--labels-out", tmp_path / "l.txt")
    )
    assert r.exit_code == 1, r.output
    assert f"{what} at row 5 (line 6), column 'y'." in r.output
    assert "drop the rows" in r.output and "SimpleImputer" in r.output
    assert "not numeric" not in r.output and "encode" not in r.output


def test_text_still_gets_the_encode_message(frame, tmp_path):
    df = frame[FEATURES].astype(object)
    df.loc[4, "y"] = "red"
    r = _cli("fit", _write(df, tmp_path / "d.csv"), "-k", 3)
    assert r.exit_code == 1
    assert "column 'y' is not numeric (line 6 holds 'red'); remove or encode" in r.output


# ------------------------------------------------------------------ the API
ESTIMATORS = {
    "MiniBatchKernelKMeans": lambda: MiniBatchKernelKMeans(
        n_clusters=3, gamma=0.1, batch_size=32, tau=20, max_iter=20, random_state=0
    ),
    "KernelKMeans": lambda: KernelKMeans(n_clusters=3, gamma=0.1, random_state=0),
    "MiniBatchKMeans": lambda: MiniBatchKMeans(
        n_clusters=3, batch_size=32, max_iter=20, random_state=0
    ),
}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_dataframe_columns_matched_by_name(frame, name):
    df = frame[FEATURES]
    est = ESTIMATORS[name]().fit(df)
    np.testing.assert_array_equal(est.feature_names_in_, FEATURES)
    labels = est.predict(df)
    reordered = df[["z", "x", "y"]]
    # positions alone would mislabel: the same values in another column order
    assert (est.predict(reordered.set_axis(FEATURES, axis=1)) != labels).any()
    # matched by the fitted names: the labels of the original order
    np.testing.assert_array_equal(est.predict(reordered), labels)
    np.testing.assert_array_equal(est.transform(reordered), est.transform(df))
    assert est.score(reordered) == est.score(df)
    for method in ("predict", "transform", "score"):
        with pytest.raises(ValueError, match=r"seen at fit time, yet now missing:\n- y"):
            getattr(est, method)(df[["x", "z"]])
        with pytest.raises(ValueError, match=r"unseen at fit time:\n- w"):
            getattr(est, method)(df.assign(w=1.0))
    with pytest.warns(
        UserWarning,
        match=f"X does not have valid feature names, but {name} was fitted with feature names",
    ):
        est.predict(df.to_numpy())
    plain = ESTIMATORS[name]().fit(df.to_numpy())
    assert not hasattr(plain, "feature_names_in_")
    with pytest.warns(
        UserWarning, match=f"X has feature names, but {name} was fitted without feature names"
    ):
        plain.predict(df)


@pytest.mark.parametrize("name", ["MiniBatchKernelKMeans", "MiniBatchKMeans"])
def test_partial_fit_matches_columns_by_name(frame, name):
    df = frame[FEATURES]
    first = ESTIMATORS[name]().partial_fit(df)
    a = clone_fitted(first).partial_fit(df)
    b = clone_fitted(first).partial_fit(df[["y", "z", "x"]])
    np.testing.assert_array_equal(a.predict(df), b.predict(df))
    np.testing.assert_array_equal(a.transform(df), b.transform(df))


def clone_fitted(est):
    import copy

    return copy.deepcopy(est)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_saved_model_keeps_feature_names(frame, name, tmp_path):
    sio = pytest.importorskip("skops.io")
    df = frame[FEATURES]
    est = ESTIMATORS[name]().fit(df)
    path = tmp_path / "m.skops"
    sio.dump(est, path)
    back = load_model(path)
    np.testing.assert_array_equal(back.feature_names_in_, FEATURES)
    np.testing.assert_array_equal(back.predict(df), est.predict(df))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # names given: no warning
        back.predict(df)
    # the CLI finds the columns of an API model by name too (no choice saved: all
    # the file's columns must be the model's)
    new = _write(df[["y", "z", "x"]], tmp_path / "new.csv")
    _, labels = _predict(path, new, tmp_path)
    np.testing.assert_array_equal(labels, est.predict(df))
    r, _ = _predict(path, _write(frame, tmp_path / "all.csv"), tmp_path, code=2)
    assert "has the columns the model was not fitted on: 'id', 'label'" in r.output
