"""Membership-inference attacks (MIA) against in-context learning, non-private and with the DP mechanisms.

Three attacks, each reported as the AUROC of a score that should be higher for *members* (records placed in the
demonstrations the system uses) than for *non-members* (records never shown):

* the **repeat attack** (``repeat``; paper 004) on what every sample-level method — and DP few-shot generation
  → synthetic ICL — answers to a query made of a truncated target: the similarity of the answer to the target's
  output;
* the **probability attack** (``probability``; paper 000 App D.1) on the token-level methods DPS-MOZO and
  AdaPMixED: the log-probability of a record's output with another record (or itself) as the demonstration;
* the **label attack** (``label``) on RNM: the same n × n design on a classification task.

Each attack module describes its setup and the rows it reports. ``scores``: the AUROC with its bootstrap CI and
the result rows; ``settings``: the DP settings the attacks run at (planned as the pipeline does); ``runner``:
``run_demo_mia``, the attacks on a config's data with the real models (``benchmarks/mia.py``).

**What the ε columns mean.** ``epsilon`` is the guarantee the mechanism is planned for as deployed
(``dpicl.planning``; ``settings``): the sample-level methods, DP few-shot generation and RNM Poisson-subsampled at
q = teachers·shots/|D| over as many queries (demonstrations) as the attack sends; DPS-MOZO drawing ``mozo_shots`` of
|D| records per token over n queries of ``max_new_tokens`` tokens; AdaPMixED over n queries. The attacks *force* the
target into the demonstrations (as 004 and 000 do), i.e. they condition on the target being sampled, which
subsampling amplification does not cover; ``epsilon_experiment`` is the bound that holds for the experiment as run
(the same mechanism parameters with sampling rate 1: the target is in its one query of a sample-level method, in
every token of its one synthetic demonstration, or in every query (token) of the n label / DPS-MOZO / AdaPMixED
queries). It can be ∞: KSA-PTR's failure probability δ0, planned for subsampled queries, exceeds δ once the target
is forced in. DPS-MOZO's bound is the paper's claim for substitution neighbours (see its module). The probability
attack scores with the mechanism's *distribution*, which the deployed system never releases (it releases one sampled
token per step): it is a stronger adversary than DP's threat model, and a small deterministic shift can be detected
when the per-record difficulty is calibrated away.

Privacy of this package: prompts, records and answers stay inside these functions. Results (``MIAResult``) carry
scores, AUROCs, counts and mechanism parameters only; exceptions name counts, never text; nothing is logged.
"""

from dpicl.evaluation.mia.common import LOG_FLOOR, Record
from dpicl.evaluation.mia.label import label_attack_scores
from dpicl.evaluation.mia.probability import probability_attack_scores
from dpicl.evaluation.mia.repeat import (
    RepeatTrial,
    repeat_attack_scores,
    repeat_trials,
    similarity_scores,
    truncate_words,
)
from dpicl.evaluation.mia.runner import REPEAT_METHODS, method_config, run_demo_mia
from dpicl.evaluation.mia.scores import (
    AUROC,
    AttackScores,
    MIAResult,
    auroc,
    markdown_table,
    roc_curve,
    roc_plot,
    to_results,
)
from dpicl.evaluation.mia.settings import (
    DPSetting,
    cached_plan,
    plan_probability_settings,
    planned_setting,
)

__all__ = [
    "AUROC",
    "LOG_FLOOR",
    "REPEAT_METHODS",
    "AttackScores",
    "DPSetting",
    "MIAResult",
    "Record",
    "RepeatTrial",
    "auroc",
    "cached_plan",
    "label_attack_scores",
    "markdown_table",
    "method_config",
    "plan_probability_settings",
    "planned_setting",
    "probability_attack_scores",
    "repeat_attack_scores",
    "repeat_trials",
    "roc_curve",
    "roc_plot",
    "run_demo_mia",
    "similarity_scores",
    "to_results",
    "truncate_words",
]
