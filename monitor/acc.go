package monitor

// acc accumulates the sums behind one row of the summary (a topic, a policy
// version, or their merge).
type acc struct {
	samples, successes          int64
	rewardSum                   float64
	groups, zeroVar, passGroups int64
	partial, incomplete         int64
	tokens, turns               int64
	eligible, pos, neg, gate    int64
	absProc                     float64
	attnN                       int64
	confSum, baseSum            float64
	lagSum                      float64
	scorerN                     int64
	scorerLagSum                float64
}

func (a *acc) merge(b *acc) {
	a.samples += b.samples
	a.successes += b.successes
	a.rewardSum += b.rewardSum
	a.groups += b.groups
	a.zeroVar += b.zeroVar
	a.passGroups += b.passGroups
	a.partial += b.partial
	a.incomplete += b.incomplete
	a.tokens += b.tokens
	a.turns += b.turns
	a.eligible += b.eligible
	a.pos += b.pos
	a.neg += b.neg
	a.gate += b.gate
	a.absProc += b.absProc
	a.attnN += b.attnN
	a.confSum += b.confSum
	a.baseSum += b.baseSum
	a.lagSum += b.lagSum
	a.scorerN += b.scorerN
	a.scorerLagSum += b.scorerLagSum
}

func (a *acc) closeGroup(g *openGroup) {
	a.groups++
	if g.allEqual {
		a.zeroVar++
	}
	if g.successes > 0 {
		a.passGroups++
	}
	switch {
	case g.partial:
		a.partial++
	case g.members < g.size:
		a.incomplete++
	}
}

// Row is the aggregate of a set of samples and of the groups they closed.
// Means and shares are 0 when their denominator is.
type Row struct {
	Samples            int64   `json:"samples"`
	RewardMean         float64 `json:"reward_mean"`
	Successes          int64   `json:"successes"`
	SuccessRate        float64 `json:"success_rate"`
	Groups             int64   `json:"groups"`
	ZeroVarianceGroups int64   `json:"zero_variance_groups"`
	ZeroVarianceShare  float64 `json:"zero_variance_share"`
	PassGroups         int64   `json:"pass_groups"`
	PassAtG            float64 `json:"pass_at_g"` // share of groups with at least one success
	PartialGroups      int64   `json:"partial_groups"`
	IncompleteGroups   int64   `json:"incomplete_groups"`
	TokensMean         float64 `json:"tokens_mean"`
	TurnsMean          float64 `json:"turns_mean"`
	PolicyLagMean      float64 `json:"policy_lag_mean"`
	// Scorer lag: scorer_policy_version − policy_version, over the samples
	// that carry the scorer's version.
	ScorerLagSamples int64   `json:"scorer_lag_samples"`
	ScorerLagMean    float64 `json:"scorer_lag_mean"`
	// LAPO: over eligible turns.
	EligibleTurns      int64   `json:"eligible_turns"`
	PositiveDeltaShare float64 `json:"positive_delta_share"`
	NegativeDeltaShare float64 `json:"negative_delta_share"`
	GatePassRate       float64 `json:"gate_pass_rate"`
	MeanAbsProcessAdv  float64 `json:"mean_abs_process_advantage"`
	// AttnSR: over samples that carry AttnSR diagnostics.
	AttnSRSamples  int64   `json:"attnsr_samples"`
	MeanConfidence float64 `json:"mean_confidence"`
	MeanBaseline   float64 `json:"mean_baseline"`
}

func ratio(a, n float64) float64 {
	if n == 0 {
		return 0
	}
	return a / n
}

func (a *acc) row() Row {
	n, e, g, at := float64(a.samples), float64(a.eligible), float64(a.groups), float64(a.attnN)
	return Row{
		Samples: a.samples, RewardMean: ratio(a.rewardSum, n), Successes: a.successes, SuccessRate: ratio(float64(a.successes), n),
		Groups: a.groups, ZeroVarianceGroups: a.zeroVar, ZeroVarianceShare: ratio(float64(a.zeroVar), g),
		PassGroups: a.passGroups, PassAtG: ratio(float64(a.passGroups), g),
		PartialGroups: a.partial, IncompleteGroups: a.incomplete,
		TokensMean: ratio(float64(a.tokens), n), TurnsMean: ratio(float64(a.turns), n), PolicyLagMean: ratio(a.lagSum, n),
		ScorerLagSamples: a.scorerN, ScorerLagMean: ratio(a.scorerLagSum, float64(a.scorerN)),
		EligibleTurns: a.eligible, PositiveDeltaShare: ratio(float64(a.pos), e), NegativeDeltaShare: ratio(float64(a.neg), e),
		GatePassRate: ratio(float64(a.gate), e), MeanAbsProcessAdv: ratio(a.absProc, e),
		AttnSRSamples: a.attnN, MeanConfidence: ratio(a.confSum, at), MeanBaseline: ratio(a.baseSum, at),
	}
}
