package monitor

import "sort"

// VersionRow is the aggregate of one policy version.
type VersionRow struct {
	PolicyVersion int64 `json:"policy_version"`
	Row
}

// Totals is the aggregate of one samples topic (or of all of them).
type Totals struct {
	Row
	// Duplicates are samples whose trajectory_id was already counted.
	Duplicates int64 `json:"duplicates"`
	// Undecodable are records that are not a decodable Sample; skipped.
	Undecodable int64 `json:"undecodable"`
	// OpenGroups are groups still waiting for members (not yet in Groups).
	OpenGroups int64 `json:"open_groups"`
	// NewestPolicyVersion is the highest policy_version seen; null before the first sample.
	NewestPolicyVersion *int64 `json:"newest_policy_version"`
	// DroppedVersionSamples are the samples in no ByPolicyVersion row (rows
	// beyond the newest Config.MaxVersions are dropped): the rows' samples
	// plus these equal Samples.
	DroppedVersionSamples int64 `json:"dropped_version_samples"`
	// ByPolicyVersion is sorted by version.
	ByPolicyVersion []VersionRow `json:"by_policy_version"`
	// BySource is sorted by source name; samples without a source are
	// under "(none)", sources beyond Config.MaxSources under "other".
	BySource []SourceRow `json:"by_source"`
}

// SourceRow is the aggregate of one data source.
type SourceRow struct {
	Source string `json:"source"`
	Row
}

func sourceRows(m map[string]*acc) []SourceRow {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]SourceRow, 0, len(names))
	for _, n := range names {
		out = append(out, SourceRow{Source: n, Row: m[n].row()})
	}
	return out
}

// Summary is GET /api/v1/summary and the last line of --once --json. Field
// names are stable; see docs/monitor.md.
type Summary struct {
	Totals
	SuccessThreshold float64 `json:"success_threshold"`
	// NewestAnnouncedVersion is the newest version announced on the policy
	// topic; null before any announcement or when it is not followed.
	NewestAnnouncedVersion *int64           `json:"newest_announced_version"`
	DeadLetters            map[string]int64 `json:"dead_letters"` // reason → count
	DeadLettersTotal       int64            `json:"dead_letters_total"`
	// Topics holds one Totals per samples topic, by name; TopicOrder is the
	// order they were given in.
	Topics     map[string]Totals `json:"topics"`
	TopicOrder []string          `json:"topic_order"`
}

func (t *topicAgg) totals() Totals {
	out := Totals{Row: t.total.row(), Duplicates: t.duplicates, Undecodable: t.undecodable,
		OpenGroups: int64(len(t.open.m)), DroppedVersionSamples: t.droppedRows, ByPolicyVersion: []VersionRow{}}
	if t.hasNewest {
		v := t.newest
		out.NewestPolicyVersion = &v
	}
	for _, v := range sortedVersions(t.versions) {
		out.ByPolicyVersion = append(out.ByPolicyVersion, VersionRow{PolicyVersion: v, Row: t.versions[v].row()})
	}
	out.BySource = sourceRows(t.sources)
	return out
}

// Summary returns the aggregates now.
func (a *Aggregator) Summary() Summary {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.summaryLocked()
}

func (a *Aggregator) summaryLocked() Summary {
	s := Summary{SuccessThreshold: a.cfg.SuccessThreshold, DeadLetters: map[string]int64{},
		Topics: map[string]Totals{}, TopicOrder: []string{}}
	var all acc
	versions := map[int64]*acc{}
	sources := map[string]*acc{}
	for _, t := range a.topics {
		s.Topics[t.name] = t.totals()
		s.TopicOrder = append(s.TopicOrder, t.name)
		all.merge(&t.total)
		s.Duplicates += t.duplicates
		s.Undecodable += t.undecodable
		s.OpenGroups += int64(len(t.open.m))
		s.DroppedVersionSamples += t.droppedRows
		if t.hasNewest && (s.NewestPolicyVersion == nil || t.newest > *s.NewestPolicyVersion) {
			v := t.newest
			s.NewestPolicyVersion = &v
		}
		for n, r := range t.sources {
			if sources[n] == nil {
				sources[n] = &acc{}
			}
			sources[n].merge(r)
		}
		for v, r := range t.versions {
			if versions[v] == nil {
				versions[v] = &acc{}
			}
			versions[v].merge(r)
		}
	}
	s.Row = all.row()
	s.ByPolicyVersion = []VersionRow{}
	for _, v := range sortedVersions(versions) {
		s.ByPolicyVersion = append(s.ByPolicyVersion, VersionRow{PolicyVersion: v, Row: versions[v].row()})
	}
	s.BySource = sourceRows(sources)
	if a.announced >= 0 {
		v := a.announced
		s.NewestAnnouncedVersion = &v
	}
	for r, n := range a.dead {
		s.DeadLetters[r] = n
		s.DeadLettersTotal += n
	}
	return s
}

// TopicCharts are the distributions and series of one topic, for the page.
type TopicCharts struct {
	Topic            string     `json:"topic"`
	Reward           HistView   `json:"reward"`
	Advantage        HistView   `json:"advantage"` // per policy token
	OutcomeAdvantage HistView   `json:"outcome_advantage"`
	Tokens           HistView   `json:"tokens"`
	Turns            HistView   `json:"turns"`
	Confidence       HistView   `json:"confidence"`
	AgeSeconds       HistView   `json:"age_seconds"`
	PolicyLag        HistView   `json:"policy_lag"`
	ScorerLag        HistView   `json:"scorer_lag"`
	EventTime        SeriesView `json:"event_time"`
	Rate             RateView   `json:"rate"`
}

// View is what the page draws: the summary and the charts, taken together.
type View struct {
	Summary Summary       `json:"summary"`
	Charts  []TopicCharts `json:"charts"`
	Changes uint64        `json:"changes"`
	Reading *Reading      `json:"reading,omitempty"`
}

// Reading says what a monitor reads, for the page.
type Reading struct {
	Topics      []string `json:"topics"`
	DeadLetters string   `json:"dead_letters"`
	Policy      string   `json:"policy"`
	From        string   `json:"from"`
	GroupIdle   string   `json:"group_idle"`
}

// View returns a consistent snapshot of everything the page shows.
func (a *Aggregator) View() View {
	now := a.now().Unix()
	a.mu.Lock()
	defer a.mu.Unlock()
	v := View{Summary: a.summaryLocked(), Changes: a.changes}
	for _, t := range a.topics {
		v.Charts = append(v.Charts, TopicCharts{
			Topic: t.name, Reward: t.reward.view(), Advantage: t.advantage.view(), OutcomeAdvantage: t.outcomeAdv.view(),
			Tokens: t.tokens.view(), Turns: t.turns.view(), Confidence: t.confidence.view(),
			AgeSeconds: t.age.view(), PolicyLag: t.lag.view(), ScorerLag: t.scorerLag.view(), EventTime: t.events.view(), Rate: t.rate.view(now),
		})
	}
	return v
}
