package protocol

// The binary attention request (feature "binary_jobs", docs/scorer-protocol.md
// "Binary attention requests"): the jobs of POST /v1/attention as
// little-endian binary, which decodes to exactly the AttentionRequest its
// JSON form (AppendAttentionRequest) decodes to, so that everything after
// decoding is shared.

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/creditflow/creditflow/scorer"
)

// FeatureBinaryJobs is the /v1/info feature of a server that accepts
// binary attention requests.
const FeatureBinaryJobs = "binary_jobs"

// MediaTypeJobs is the binary attention request's media type (Content-Type).
const MediaTypeJobs = "application/vnd.creditflow.jobs"

const magicJobs = "CFJ1"

// Job flags.
const (
	jobLayers = 1 << iota // a layer array follows the steps
)

// Step flags.
const (
	stepObservation = 1 << iota // the observation span follows the action's
)

// JobsFitBinary reports whether jobs have a binary form that decodes to
// what their JSON form does: every id UTF-8 (JSON would replace the bad
// bytes) and every span end and layer an int32.
func JobsFitBinary(jobs []scorer.AttentionJob) bool {
	fits := func(v int) bool { return v == int(int32(v)) }
	for i := range jobs {
		j := &jobs[i]
		if !utf8.ValidString(j.ID) {
			return false
		}
		for _, s := range j.Steps {
			if !fits(s.Action[0]) || !fits(s.Action[1]) || !fits(s.Observation[0]) || !fits(s.Observation[1]) {
				return false
			}
		}
		for _, l := range j.Layers {
			if !fits(l) {
				return false
			}
		}
	}
	return true
}

// AppendJobsRequest appends the binary form of an attention request. As in
// the JSON form, a step's observation is sent only when it is not empty,
// and a job's layers are absent when nil. Jobs that do not fit the form
// (JobsFitBinary) are an error.
func AppendJobsRequest(dst []byte, jobs []scorer.AttentionJob) ([]byte, error) {
	if !JobsFitBinary(jobs) {
		return dst, fmt.Errorf("attention jobs with an id that is not UTF-8 or a span or layer beyond int32 have no binary form")
	}
	n := len(magicJobs) + 4
	for i := range jobs {
		j := &jobs[i]
		n += 4 + len(j.ID) + 4 + 4*len(j.Tokens) + 4 + 17*len(j.Steps) + 5 + 4*len(j.Layers)
	}
	dst = slices.Grow(dst, n)
	dst = append(dst, magicJobs...)
	dst = appendU32(dst, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		dst = appendU32(dst, len(j.ID))
		dst = append(dst, j.ID...)
		dst = appendIDs(dst, j.Tokens)
		dst = appendU32(dst, len(j.Steps))
		for _, s := range j.Steps {
			dst = appendPair(dst, s.Action[0], s.Action[1])
			if s.Observation[1] > s.Observation[0] {
				dst = append(dst, stepObservation)
				dst = appendPair(dst, s.Observation[0], s.Observation[1])
			} else {
				dst = append(dst, 0)
			}
		}
		if j.Layers == nil {
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, jobLayers)
		dst = appendU32(dst, len(j.Layers))
		for _, l := range j.Layers {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(int32(l)))
		}
	}
	return dst, nil
}

// DecodeJobsRequest reads a binary attention request into the
// AttentionRequest its JSON form gives. Counts are checked against the
// bytes that follow before anything is allocated for them.
func DecodeJobsRequest(b []byte) (AttentionRequest, error) {
	r := &binReader{b: b, i: -1, j: -1, k: -1}
	r.magic(magicJobs)
	n := r.count("job", 13)
	req := AttentionRequest{Jobs: make([]WireJob, 0, n)}
	for i := 0; i < n && r.err == nil; i++ {
		r.unit, r.i = "job", i
		var j WireJob
		id := r.take(r.count("id byte", 1))
		if r.err == nil && !utf8.Valid(id) {
			r.fail(fmt.Errorf("%s is not UTF-8", r.where("id")))
		}
		j.ID = string(id)
		j.Tokens = r.ids("token")
		ns := r.count("step", 9)
		j.Steps = make([]WireStep, 0, ns)
		for s := 0; s < ns && r.err == nil; s++ {
			var st WireStep
			st.Action = [2]int{r.i32(), r.i32()}
			if r.flags("step", stepObservation)&stepObservation != 0 {
				st.Observation = r.pair()
			}
			j.Steps = append(j.Steps, st)
		}
		if r.flags("job", jobLayers)&jobLayers != 0 {
			nl := r.count("layer", 4)
			raw := r.take(4 * nl)
			if r.err == nil {
				j.Layers = make([]int, nl)
				for x := range j.Layers {
					j.Layers[x] = int(int32(binary.LittleEndian.Uint32(raw[4*x:])))
				}
			}
		}
		req.Jobs = append(req.Jobs, j)
	}
	r.end()
	if r.err != nil {
		return AttentionRequest{}, r.err
	}
	return req, nil
}
