"""The learning section of the settings (service/settings.py reads it as TOOLSCOUT_LEARNING__...): the boosts,
the usage signal and the query adapter learned from use (usage/learning.py, signal.py, adapter.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LearningSettings(BaseModel):
    """Bounded ranking boosts learned from the execution log."""

    model_config = ConfigDict(extra="forbid")  # as service.settings.Section's (which imports this module)

    enabled: bool = True
    half_life_days: float = 14.0
    max_popularity_boost: float = 0.06  # these bounds: usage/learning.py, tuned with `toolscout bench learning`
    max_reliability_penalty: float = 1.0
    max_caller_boost: float = 0.3
    refresh_seconds: float = 15.0  # background refresh period (also woken by request_refresh)
    refresh_lag_seconds: float = 10.0  # rows finished this recently wait (the log is written in batches)
    refresh_batch: int = 10_000  # executions consumed per transaction
    popularity_half_calls: float = 20.0  # decayed calls at which the popularity boost is half its maximum
    habit_half_calls: float = 3.0  # decayed successful calls by one caller at which its habit boost is half
    reliability_prior_success: float = 0.95  # smoothing prior of the success rate ...
    reliability_prior_weight: float = 5.0  # ... worth this many calls
    reliability_tolerance: float = 0.20  # a smoothed failure rate up to this costs nothing
    latency_smoothing: float = 0.1  # weight of a new call in the moving average of latency
    cooccurrence_window_seconds: float = 300.0  # two calls this close by one caller count as used together
    # The usage signal (usage/signal.py): weight * n / (n + usage_half_evidence) * the tool's share of a softmax over
    # the candidates' nearest past queries and "nobody"; tuned with `toolscout bench learning --signal usage`.
    usage_weight: float = 3.0  # the most it adds to a fused score (sums of z-scores)
    usage_half_evidence: float = 2.0  # decayed successful queries at which the signal reaches half its weight
    usage_floor: float = 0.7  # a nearest past query this similar weighs as much as "nobody's history"
    usage_temperature: float = 0.05  # softmax temperature over cosines (lower: only near paraphrases count)
    usage_max_queries: int = 32  # kept per scope and tool (when full, a caller holding the most loses its oldest)
    shared_calls_per_caller: float = 2.0  # of one caller's calls of a tool others count (usage/shares.py): -.15 at most
    share_invalid_arguments: bool = True  # as failures for the others too (False: 1 query in 2,000 of bench learning)
    usage_evidence_per_caller: float = 0.1  # one caller's, in its latest 2 queries of a tool: others' usage +.14 max
    # The query adapter (usage/adapter.py): per scope and caller a linear map of the query vector trained on the
    # caller's own usage evidence; the change it makes to a tool-with-history's fused score is added, rises cut behind
    # the newcomers.
    query_adapter_enabled: bool = True  # False: no map trained or applied (the usage signal alone)
    adapter_weight: float = 1.0  # the most it moves a fused score (sums of z-scores), either way
    adapter_min_queries: int = 32  # distinct queries of its own a caller needs for a map (its own only)
    adapter_max_queries: int = 2000  # the latest distinct queries a map trains on (CPU: ~1-4 s per 1,000)
    adapter_own_maps: int = 8  # per scope, the callers (most queries first) with a map of their own (576 KB each)
    adapter_retrain_growth: float = 0.2  # a map is trained again once its scope's evidence grew by this share
    adapter_train_seconds: float = 30.0  # each map's training stops here (on a worker thread, one BLAS thread)
