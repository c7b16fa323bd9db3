package simulate

import (
	"encoding/json"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// TestTemplateDatesEachRender: a batch is written when it is sent; its times keep the order
// and spacing the template had.
func TestTemplateDatesEachRender(t *testing.T) {
	gen := NewEvents(1, nil)
	tm, err := NewTemplate(gen, 50)
	if err != nil {
		t.Fatal(err)
	}
	var orig auditv1.EventList
	if err := json.Unmarshal(tm.body, &orig); err != nil {
		t.Fatal(err)
	}
	tm.stamps.newest -= time.Hour.Microseconds() // as if the template were an hour old
	before := time.Now()
	var list auditv1.EventList
	if err := json.Unmarshal(tm.Render(0, 1), &list); err != nil {
		t.Fatal(err)
	}
	for i, ev := range list.Items {
		o := orig.Items[i]
		if d := ev.StageTimestamp.Sub(o.StageTimestamp.Time); d < 59*time.Minute || d > 61*time.Minute {
			t.Fatalf("event %d moved by %v, want an hour", i, d)
		}
		if ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp.Time) != o.StageTimestamp.Sub(o.RequestReceivedTimestamp.Time) {
			t.Fatalf("event %d: its duration changed", i)
		}
		if ev.StageTimestamp.After(before.Add(time.Hour + time.Minute)) {
			t.Fatalf("event %d written in the future", i)
		}
	}
}

func TestFindStampsRefusesWhatItCannotRewrite(t *testing.T) {
	for _, body := range []string{
		`{"stageTimestamp":"2026-12-01T07:53:40.532367+01:00"}`,
		`{"stageTimestamp":"2026-12-01T07:53:40Z"}`,
		`{"stageTimestamp":"2026-12-01T07:53:40.532367Z`,
	} {
		if _, err := FindStamps([]byte(body)); err == nil {
			t.Errorf("%s: no error", body)
		}
	}
	s, err := FindStamps([]byte(`{"requestReceivedTimestamp":"2026-12-01T07:53:40.500000Z","stageTimestamp":"2026-12-01T07:53:40.532367Z"}`))
	if err != nil || !s.Newest().Equal(time.Date(2026, 12, 1, 7, 53, 40, 532367000, time.UTC)) {
		t.Fatalf("%v %v", s.Newest(), err)
	}
}
