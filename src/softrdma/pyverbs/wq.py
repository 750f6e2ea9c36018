from ..verbs.wq import RwqIndTable, RwqIndTableInitAttr, RxHashConf, WQ, WQAttr, WQInitAttr  # noqa: F401
