"""pyverbs.providers.mlx5.dr_action: mlx5 steering (DR) actions; not on softrdma's device."""

from .._vendor import other_vendor

globals().update(other_vendor(
    "mlx5",
    "DrAction", "DrActionQp", "DrActionFlowCounter", "DrActionDrop", "DrActionModify",
    "DrActionTag", "DrActionDestTable", "DrActionPopVLan", "DrActionPushVLan", "DrActionDestAttr",
    "DrActionDestArray", "DrActionDefMiss", "DrActionVPort", "DrActionIBPort", "DrActionDestTir",
    "DrActionPacketReformat", "DrFlowSamplerAttr", "DrActionFlowSample",
    "DrFlowMeterAttr", "DrActionFlowMeter"))
