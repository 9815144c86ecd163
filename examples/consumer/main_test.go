package main

import (
	"bytes"
	"testing"
	"time"
)

// TestStories plays every story on a real in-process JetStream server and
// checks the effects per message: once each with idemgen; without it, the
// duplicates each story produces (the producer retry is the one case the
// broker's Nats-Msg-Id window covers on its own). Redelivery is driven by
// the broker: a crash waits for AckWait to pass (no race: the consumer's
// fetch blocks until the redelivery comes, however long that takes), a Nak
// redelivers at once, and the dead letter is announced by its advisory.
func TestStories(t *testing.T) {
	var out bytes.Buffer
	res, err := run(t.Context(), &out, time.Second)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int{ // story: {with idemgen, without}
		storyProducerRetry: {1, 1},
		storyCrash:         {1, 2},
		storyNak:           {1, 2},
		storyRedrive:       {1, 3},
	}
	for story, w := range want {
		if got := [2]int{res.With[story], res.Without[story]}; got != w {
			t.Errorf("%s: effects %d with idemgen, %d without; want %d, %d", story, got[0], got[1], w[0], w[1])
		}
	}
	if len(res.With) != len(want) || len(res.Without) != len(want) {
		t.Errorf("stories played: %v / %v", res.With, res.Without)
	}
}
