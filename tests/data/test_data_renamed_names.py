"""The original's parameter names still work, warn, and name their replacement (roxxel.deprecation).

One test per renamed name: ``primary_streamer``, ``mix_streamers``, the weight key ``"self"``,
``Phase(batch_size=)``, ``Stream(mesh=)``, ``Stream(data_sharding=)``; each proves the old
name gives the same curriculum (fingerprint) or stream as the new one.
"""

import warnings

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.deprecation import RoxxelDeprecationWarning
from roxxel.sharding import batch_sharding, default_mesh


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("renamed")
    rng = np.random.default_rng(0)
    out = {}
    for name in ("a", "b"):
        ds = Roxxel(str(root / f"{name}.rox"))
        ds.write([rng.integers(1, 200, 300).astype(np.uint16) for _ in range(8)], separator=0)
        out[name] = ds
    return out


PHASES = [Phase(steps=3, global_batch_size=2, seq_len=16, weights={"primary": 1, "b": 1})]


def new_form(data):
    return Curriculum({"primary": data["a"], "b": data["b"]}, PHASES, chunk_tokens=64)


def test_primary_streamer_warns_and_means_datasets(data):
    with pytest.warns(RoxxelDeprecationWarning, match="primary_streamer is deprecated, use datasets"):
        old = Curriculum(primary_streamer=data["a"], phases=[Phase(steps=3, global_batch_size=2, seq_len=16)])
    assert old.fingerprint() == Curriculum(data["a"], [Phase(steps=3, global_batch_size=2, seq_len=16)]).fingerprint()
    with pytest.raises(ValueError, match="datasets=.*primary_streamer=.*disagree; give only datasets"):
        Curriculum(data["b"], PHASES, primary_streamer=data["a"])


def test_mix_streamers_warns_and_means_the_datasets_dict(data):
    with pytest.warns(RoxxelDeprecationWarning, match=r"mix_streamers is deprecated, use datasets=\{'primary'"):
        old = Curriculum(data["a"], PHASES, {"b": data["b"]}, chunk_tokens=64)
    assert old.names == ("primary", "b") and old.fingerprint() == new_form(data).fingerprint()
    with pytest.raises(ValueError, match="not also as mix_streamers"), pytest.warns(RoxxelDeprecationWarning):
        Curriculum({"primary": data["a"]}, PHASES, mix_streamers={"b": data["b"]})


def test_self_weight_key_warns_and_means_the_primary_dataset(data):
    with pytest.warns(
        RoxxelDeprecationWarning, match="weight key 'self' is deprecated, use the primary dataset's name 'primary'"
    ):
        old = Curriculum(
            {"primary": data["a"], "b": data["b"]},
            [Phase(steps=3, global_batch_size=2, seq_len=16, weights={"self": 1, "b": 1})],
            chunk_tokens=64,
        )
    assert old.fingerprint() == new_form(data).fingerprint()
    assert new_form(data).describe()["datasets"].keys() == {"self", "b"}  # checkpoints of older runs still match
    with pytest.raises(ValueError, match="primary dataset twice"), pytest.warns(RoxxelDeprecationWarning):
        Curriculum(data["a"], [Phase(steps=1, global_batch_size=2, seq_len=16, weights={"self": 1, "primary": 1})])


def test_named_datasets_key_the_weights(data):
    c = Curriculum(
        {"web": data["a"], "code": data["b"]},
        [Phase(steps=3, global_batch_size=2, seq_len=16, weights={"web": 1, "code": 1})],
        chunk_tokens=64,
    )
    assert c.names == ("web", "code") and c.primary is data["a"]
    assert c.describe()["phases"][0]["weights"] == {"web": 1.0, "code": 1.0}
    with pytest.raises(ValueError, match="named 'self'"):
        Curriculum({"self": data["a"]}, PHASES)


def test_phase_batch_size_warns_and_means_global_batch_size():
    with pytest.warns(RoxxelDeprecationWarning, match="Phase: batch_size is deprecated, use global_batch_size"):
        old = Phase(steps=3, batch_size=4, seq_len=8)
    assert old == Phase(steps=3, global_batch_size=4, seq_len=8) and old.batch_size == 4
    with pytest.raises(ValueError, match="disagree"):
        Phase(global_batch_size=2, batch_size=4, seq_len=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the original's dict form keeps its key without a warning
        assert Phase.coerce({"steps": 3, "batch_size": 4, "seq_len": 8}) == old


def test_the_warning_points_at_the_callers_line(data):
    with pytest.warns(RoxxelDeprecationWarning) as caught:
        Curriculum(data["a"], PHASES, {"b": data["b"]}, chunk_tokens=64)
    assert {w.filename for w in caught} == {__file__}


def rows(stream):
    with stream:
        return [np.asarray(b) for b in stream]


def test_stream_data_sharding_warns_and_means_sharding(data):
    c = new_form(data)
    sharding = batch_sharding(default_mesh())
    with pytest.warns(RoxxelDeprecationWarning, match="Stream: data_sharding is deprecated, use sharding"):
        old = c.stream(seed=1, data_sharding=sharding)
    assert old.sharding == sharding
    assert all(np.array_equal(x, y) for x, y in zip(rows(old), rows(c.stream(seed=1, sharding=sharding))))


def test_stream_mesh_warns_and_means_rows_over_its_first_axis(data):
    c = new_form(data)
    with pytest.warns(RoxxelDeprecationWarning, match=r"Stream: mesh is deprecated, use sharding=NamedSharding"):
        old = c.stream(seed=1, mesh=default_mesh())
    assert old.sharding == batch_sharding(default_mesh())
    old.close()
