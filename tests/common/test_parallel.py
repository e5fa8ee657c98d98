from diag.common import parallel


def test_megatron_and_device_mesh_groups_give_coordinates_in_megatrons_order():
    places = {"DATA_PARALLEL_GROUP": 3, "PIPELINE_MODEL_PARALLEL_GROUP": 0, "TENSOR_MODEL_PARALLEL_GROUP": 1,
              "default": 9, "pg 4": 0}
    assert parallel.coords(places) == "tp 1, pp 0, dp 3"
    assert parallel.coords({"mesh_dp_shard": 2, "mesh_tp": 1}) == "tp 1, dp_shard 2"


def test_unnamed_groups_give_none():
    assert parallel.coords({"default": 0, "pg 7": 1, "mesh_": 0}) == ""
    assert parallel.axis("EMBEDDING_GROUP") is None
