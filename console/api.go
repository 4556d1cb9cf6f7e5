package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kdelay/kdelay/cancel"
	"github.com/kdelay/kdelay/deadletter"
	"github.com/kdelay/kdelay/levels"
	"github.com/kdelay/kdelay/schedules"
)

// schedulePage is the answer of GET /api/v1/schedules.
type schedulePage struct {
	Schedules []schedules.Schedule `json:"schedules"`
	// Next is the cursor of the next page, "" on the last one.
	Next string `json:"next"`
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := schedules.ParseFilter(q.Get, s.o.Config.Table().Levels(), MaxLimit)
	if err != nil {
		badParam(w, err)
		return
	}
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	ss, next := s.o.Index.Index().Query(f, s.o.Now())
	if ss == nil {
		ss = []schedules.Schedule{}
	}
	writeJSON(w, http.StatusOK, schedulePage{Schedules: ss, Next: next})
}

func badParam(w http.ResponseWriter, err error) {
	var pe *schedules.ParamError
	if errors.As(err, &pe) {
		writeError(w, http.StatusBadRequest, apiError{Error: pe.Error(), Param: pe.Param})
		return
	}
	writeError(w, http.StatusBadRequest, apiError{Error: err.Error()})
}

// idSchedules is the answer of GET /api/v1/schedules/{id}.
type idSchedules struct {
	ID string `json:"id"`
	// Schedules are the records with the id above the commits, in every
	// state.
	Schedules []schedules.Schedule `json:"schedules"`
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ss := s.o.Index.Index().Get(id, s.o.Now())
	if len(ss) == 0 {
		notFound(w, id)
		return
	}
	writeJSON(w, http.StatusOK, idSchedules{ID: id, Schedules: ss})
}

func notFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no schedule with id %q above the relays' commits: delivered or cancelled and committed, or never scheduled", id)})
}

// cancelAnswer is the answer of DELETE /api/v1/schedules/{id}.
type cancelAnswer struct {
	ID string `json:"id"`
	// Cutoff: records with the id whose original timestamp lies before it
	// are cancelled.
	Cutoff time.Time `json:"cutoff"`
	// Where the cancel was written, and when the broker acknowledged it.
	Topic          string    `json:"topic"`
	Partition      int32     `json:"partition"`
	Offset         int64     `json:"offset"`
	AcknowledgedAt time.Time `json:"acknowledged_at"`
	// Pending is how many pending schedules the cancel matches.
	Pending int `json:"pending"`
}

func (s *Server) cancelSchedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	now := s.o.Now()
	pending := 0
	for _, sc := range s.o.Index.Index().Get(id, now) {
		if schedules.Pending(sc.State) {
			pending++
		}
	}
	if pending == 0 {
		notFound(w, id)
		return
	}
	ctx, cancelCtx := context.WithTimeout(r.Context(), writeTimeout)
	defer cancelCtx()
	ack, err := cancel.Write(ctx, s.keyed, s.o.Config.CancelTopic, id, time.Time{}, now)
	if err != nil {
		s.brokerFailure(w, "the cancel was not acknowledged (it may or may not take effect; check GET /api/v1/schedules/"+id+")", err)
		return
	}
	writeJSON(w, http.StatusOK, cancelAnswer{ID: id, Cutoff: ack.Cutoff.UTC(), Topic: ack.Topic, Partition: ack.Partition,
		Offset: ack.Offset, AcknowledgedAt: ack.AckedAt.UTC(), Pending: pending})
}

// scheduleRequest is the body of POST /api/v1/schedules.
type scheduleRequest struct {
	Target  string            `json:"target"`
	Key     *string           `json:"key"`
	Value   *string           `json:"value"`
	Headers map[string]string `json:"headers"`
	// One of Delay (a Go duration or milliseconds), DeliverAt (RFC 3339 or
	// epoch milliseconds) and Level.
	Delay           string `json:"delay"`
	DeliverAt       string `json:"deliver_at"`
	Level           int    `json:"level"`
	ID              string `json:"id"`
	TargetPartition *int32 `json:"target_partition"`
}

// scheduleAnswer is the answer of POST /api/v1/schedules.
type scheduleAnswer struct {
	ID        string    `json:"id,omitempty"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Level     int       `json:"level"`
	DueAt     time.Time `json:"due_at"`
}

// maxBody bounds a request body.
const maxBody = 1 << 20

func (s *Server) postSchedule(w http.ResponseWriter, r *http.Request) {
	var req scheduleRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: "body: " + err.Error() + " (want a JSON object: target, key, value, headers, one of delay, deliver_at, level, optional id)"})
		return
	}
	now := s.o.Now()
	rec, sched, e := s.stamp(req, now)
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	ctx, cancelCtx := context.WithTimeout(r.Context(), writeTimeout)
	defer cancelCtx()
	if e, err := s.checkTarget(ctx, sched); err != nil {
		s.brokerFailure(w, "cannot check the target topic", err)
		return
	} else if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	res := s.manual.ProduceSync(ctx, rec)
	if err := res.FirstErr(); err != nil {
		s.brokerFailure(w, "the record was not acknowledged (it may or may not have been written)", err)
		return
	}
	out := res[0].Record
	writeJSON(w, http.StatusCreated, scheduleAnswer{ID: sched.ID, Topic: out.Topic, Partition: out.Partition, Offset: out.Offset,
		Level: s.o.Config.Table().LevelOf(out.Partition), DueAt: sched.Due.UTC()})
}

// stamp builds the delay-topic record of req and checks it as a relay
// would: the header contract (levels.Table.Parse, on the very header
// values given), the target policy and KDELAY_MAX_DELAY. A record the
// relay would dead-letter is an apiError with its reason.
func (s *Server) stamp(req scheduleRequest, now time.Time) (*kgo.Record, levels.Schedule, *apiError) {
	tab := s.o.Config.Table()
	set := 0
	for _, given := range []bool{req.Delay != "", req.DeliverAt != "", req.Level != 0} {
		if given {
			set++
		}
	}
	if set != 1 {
		return nil, levels.Schedule{}, &apiError{Error: "give exactly one of delay, deliver_at and level", Reason: levels.Reason(levels.ErrNoSchedule)}
	}
	rec := &kgo.Record{Topic: s.o.Config.Topic, Timestamp: now.Truncate(time.Millisecond)}
	if req.Key != nil {
		rec.Key = []byte(*req.Key)
	}
	if req.Value != nil {
		rec.Value = []byte(*req.Value)
	}
	for k, v := range req.Headers {
		if levels.IsControl(k) {
			return nil, levels.Schedule{}, &apiError{Error: fmt.Sprintf("header %q: kdelay- headers are set from the body's fields", k), Param: "headers"}
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	add := func(k, v string) { rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(levels.HeaderTarget, req.Target)
	switch {
	case req.Delay != "":
		add(levels.HeaderDelay, req.Delay)
	case req.DeliverAt != "":
		add(levels.HeaderDeliverAt, req.DeliverAt)
	default:
		add(levels.HeaderLevel, strconv.Itoa(req.Level))
	}
	if req.ID != "" {
		add(levels.HeaderID, req.ID)
	}
	if req.TargetPartition != nil {
		add(levels.HeaderTargetPartition, strconv.Itoa(int(*req.TargetPartition)))
	}
	sched, err := tab.Parse(rec.Headers, rec.Timestamp)
	if err != nil {
		return nil, sched, &apiError{Error: err.Error() + ": a relay would dead-letter this record", Reason: levels.Reason(err)}
	}
	cfg := s.o.Config
	if ok, why := cfg.TargetAllowed(sched.Target); !ok {
		return nil, sched, &apiError{Error: fmt.Sprintf("target %q refused: %s: a relay would dead-letter this record", sched.Target, why), Reason: "target_refused"}
	}
	if sched.Delay > cfg.MaxDelay {
		return nil, sched, &apiError{Error: fmt.Sprintf("delay %s exceeds KDELAY_MAX_DELAY %s: a relay would dead-letter this record", sched.Delay, cfg.MaxDelay), Reason: "delay_too_long"}
	}
	level := req.Level
	if level == 0 {
		level = tab.LevelFor(sched.Delay)
	}
	rec.Partition = tab.PartitionFor(level, rec.Key)
	return rec, sched, nil
}

// checkTarget refuses a target topic that does not exist, or a target
// partition it does not have: a relay dead-letters such records.
func (s *Server) checkTarget(ctx context.Context, sched levels.Schedule) (*apiError, error) {
	tds, err := s.adm.ListTopics(ctx, sched.Target)
	if err != nil {
		return nil, err
	}
	td, ok := tds[sched.Target]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return &apiError{Error: fmt.Sprintf("target topic %q does not exist: a relay would dead-letter this record after KDELAY_TARGET_MISSING_TIMEOUT", sched.Target), Reason: "target_missing"}, nil
	}
	if td.Err != nil {
		return nil, td.Err
	}
	if sched.TargetPartition >= int32(len(td.Partitions)) {
		return &apiError{Error: fmt.Sprintf("target topic %q has %d partitions, no partition %d: a relay would dead-letter this record", sched.Target, len(td.Partitions), sched.TargetPartition), Reason: "bad_target_partition"}, nil
	}
	return nil, nil
}

func (s *Server) due(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	get := func(name, def string) (time.Duration, bool) {
		v := q.Get(name)
		if v == "" {
			v = def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("invalid %s %q: want a positive Go duration (1m, 2h)", name, v), Param: name})
			return 0, false
		}
		return d, true
	}
	bucket, ok := get("bucket", "1m")
	if !ok {
		return
	}
	horizon, ok := get("horizon", "1h")
	if !ok {
		return
	}
	if n := (horizon + bucket - 1) / bucket; n > schedules.MaxBuckets {
		writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("invalid horizon %s: %d buckets of %s, at most %d", horizon, n, bucket, schedules.MaxBuckets), Param: "horizon"})
		return
	}
	writeJSON(w, http.StatusOK, s.o.Index.Index().Due(s.o.Now(), bucket, horizon))
}

// deadLetterPage is the answer of GET /api/v1/dead-letters.
type deadLetterPage struct {
	Topic       string              `json:"topic"`
	DeadLetters []deadletter.Letter `json:"dead_letters"`
}

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter, err := deadletter.NewReasonFilter(q.Get("reason"))
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("invalid reason %q: %v", q.Get("reason"), errors.Unwrap(err)), Param: "reason"})
		return
	}
	limit := DefaultLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > MaxLimit {
			writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("invalid limit %q: want 1..%d", v, MaxLimit), Param: "limit"})
			return
		}
	}
	ctx, cancelCtx := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancelCtx()
	ds, err := deadletter.List(ctx, s.o.KafkaOpts, s.o.Config.DLQTopic, filter, q.Get("target"), limit)
	if err != nil {
		s.brokerFailure(w, "cannot read the dead-letter topic", err)
		return
	}
	writeJSON(w, http.StatusOK, deadLetterPage{Topic: s.o.Config.DLQTopic, DeadLetters: ds})
}

// replayRequest is the body of POST /api/v1/dead-letters/replay.
type replayRequest struct {
	// Reason keeps the dead letters whose kdelay-error matches this
	// regular expression (case-insensitive); empty: all.
	Reason string `json:"reason"`
	// DryRun counts what would be replayed.
	DryRun bool `json:"dry_run"`
}

// replayAnswer is the answer of POST /api/v1/dead-letters/replay.
type replayAnswer struct {
	deadletter.Summary
	Group  string `json:"group"`
	DryRun bool   `json:"dry_run"`
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err == nil && len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: "body: " + err.Error() + ` (want {"reason": "...", "dry_run": false}, both optional)`})
		return
	}
	filter, err := deadletter.NewReasonFilter(req.Reason)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("invalid reason %q: %v", req.Reason, errors.Unwrap(err)), Param: "reason"})
		return
	}
	if !s.replaying.TryLock() {
		writeError(w, http.StatusConflict, apiError{Error: "a replay is already running on this console"})
		return
	}
	defer s.replaying.Unlock()
	cfg := s.o.Config
	group := deadletter.ReplayGroup(cfg.Group, req.Reason)
	ctx, cancelCtx := context.WithTimeout(r.Context(), replayTimeout)
	defer cancelCtx()
	sum, err := deadletter.Replayer{KafkaOpts: s.o.KafkaOpts, Topic: cfg.Topic, DLQTopic: cfg.DLQTopic, Table: cfg.Table(),
		Group: group, Filter: filter, DryRun: req.DryRun, Log: s.o.Log}.Run(ctx)
	if err != nil {
		s.brokerFailure(w, fmt.Sprintf("replay stopped after %d dead letters (what was replayed is committed; replay again to go on)", sum.Replayed), err)
		return
	}
	writeJSON(w, http.StatusOK, replayAnswer{Summary: sum, Group: group, DryRun: req.DryRun})
}

// statusAnswer is the answer of GET /api/v1/status.
type statusAnswer struct {
	Topic       string          `json:"topic"`
	CancelTopic string          `json:"cancel_topic"`
	DLQTopic    string          `json:"dlq_topic"`
	CheckedAt   time.Time       `json:"checked_at"`
	Index       indexStatus     `json:"index"`
	Group       schedules.Group `json:"group"`
	Lag         int64           `json:"lag"`
	Levels      []levelStatus   `json:"levels"`
	Writes      string          `json:"writes"` // "token" or "disabled"
}

type indexStatus struct {
	Ready   bool   `json:"ready"`
	Records int    `json:"records"`
	Error   string `json:"error,omitempty"`
}

type levelStatus struct {
	schedules.LevelStats
	Delay      string                      `json:"delay"`
	Lag        int64                       `json:"lag"`
	Partitions []schedules.PartitionStatus `json:"partitions"`
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	now := s.o.Now()
	cfg := s.o.Config
	tab := cfg.Table()
	a := statusAnswer{Topic: cfg.Topic, CancelTopic: cfg.CancelTopic, DLQTopic: cfg.DLQTopic, CheckedAt: now.UTC(),
		Group: s.o.Index.Group(), Writes: "disabled", Levels: []levelStatus{}}
	if s.o.Token != "" {
		a.Writes = "token"
	}
	select {
	case <-s.o.Index.Ready():
		a.Index.Ready = true
	default:
	}
	a.Index.Records = s.o.Index.Index().Len()
	code := http.StatusOK
	if err := s.unavailable(); err != nil {
		a.Index.Error = err.Error()
		code = http.StatusServiceUnavailable
	}
	parts := s.o.Index.Partitions()
	for _, ls := range s.o.Index.Index().Levels(now) {
		l := levelStatus{LevelStats: ls, Delay: levels.FormatDuration(tab.Duration(ls.Level)), Partitions: []schedules.PartitionStatus{}}
		for _, p := range parts {
			if p.Level == ls.Level {
				l.Partitions = append(l.Partitions, p)
				l.Lag += p.Lag
			}
		}
		a.Lag += l.Lag
		a.Levels = append(a.Levels, l)
	}
	if code != http.StatusOK {
		w.Header().Set("Retry-After", "2")
	}
	writeJSON(w, code, a)
}
