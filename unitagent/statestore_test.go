package unitagent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStateStoreSavesAndLoads saves a state after each of many steps, the
// journal folded into snapshots now and then, every third save unsynced
// (commitWritten, as a hook's end is), and loads each back whole: a record written
// unsynced is there for the agent restarted after a crash of its own.
func TestStateStoreSavesAndLoads(t *testing.T) {
	dir := t.TempDir()
	want := states(t, 400)
	s := newStateStore(dir)
	s.compactMinBytes = 1 << 10
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	snapshots := 0
	for i := 1; i < len(want); i++ {
		step(l, i)
		before := s.snapshotBytes
		d, unsynced := commitSynced, i%3 == 0
		if unsynced {
			d = commitWritten
		}
		if err := s.commit(l, d); err != nil {
			t.Fatal(err)
		}
		if s.journalBytes == 0 && s.snapshotBytes != before {
			snapshots++
		} else if s.unsynced != unsynced && s.journalBytes > 0 && i > 1 {
			t.Fatalf("step %d: after a save (unsynced %v) the journal is unsynced %v", i, unsynced, s.unsynced)
		}
		if i%9 == 0 {
			if err := s.sync(barrierSync); err != nil || s.unsynced {
				t.Fatalf("step %d: sync = %v, still unsynced %v", i, err, s.unsynced)
			}
		}
		if got := canon(t, l, dir); got != want[i] {
			t.Fatalf("step %d: the state in memory is not what the steps make", i)
		}
		if got, _, _ := loadCanon(t, dir); got != want[i] {
			t.Fatalf("step %d: loaded\n%s\nwant\n%s", i, got, want[i])
		}
	}
	if snapshots < 3 {
		t.Errorf("%d snapshots written in %d saves: want the journal folded into several", snapshots, len(want)-1)
	}
}

// TestStateStoreSyncs counts the syncs of each kind of commit and barrier,
// in turn on one store: an unsynced record (commitWritten) makes none, even
// the one that creates the journal; the barrier after it (a "flush",
// barrierSync) syncs the journal and, once, its directory; a synced record
// syncs itself, and the directory of a journal it created; a change left
// for later (commitLazy), its flush and its settle (barrierSettle) make
// none, but a settle after an unsynced record syncs.
func TestStateStoreSyncs(t *testing.T) {
	var dir string
	var synced []string
	countSyncs := func(f *os.File) error {
		name := filepath.Base(f.Name())
		if f.Name() == dir {
			name = "dir"
		}
		synced = append(synced, name)
		return f.Sync()
	}
	for _, unsyncedFirst := range []bool{true, false} {
		dir = t.TempDir()
		s := newStateStore(dir)
		s.syncFile = countSyncs
		l, err := s.load()
		if err != nil {
			t.Fatal(err)
		}
		save, flush := func() error { return s.commit(l, commitSynced) }, func() error { return s.sync(barrierSync) }
		settle := func() error { return s.sync(barrierSettle) }
		unsynced := func() error { return s.commit(l, commitWritten) }
		type stage struct {
			name string
			do   func() error
			want string
		}
		stages := []stage{
			{"save of a new journal", save, "[state.log dir]"},
			{"unsynced save", unsynced, "[]"},
			{"flush", flush, "[state.log]"},
		}
		if unsyncedFirst {
			stages = []stage{
				{"unsynced save of a new journal", unsynced, "[]"},
				{"unsynced save", unsynced, "[]"},
				{"flush", flush, "[state.log dir]"},
			}
		}
		later := func() error { return s.commit(l, commitLazy) }
		stages = append(stages, stage{"flush again", flush, "[]"}, stage{"save", save, "[state.log]"},
			stage{"left for later", later, "[]"}, stage{"flush of what was left", flush, "[]"},
			stage{"settle", settle, "[]"}, stage{"settle again", settle, "[]"},
			stage{"unsynced save", unsynced, "[]"},
			stage{"settle of a hook's end", func() error {
				if err := later(); err != nil {
					return err
				}
				return settle()
			}, "[state.log]"})
		for i, st := range stages {
			step(l, i+1)
			synced = nil
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if got := fmt.Sprint(synced); got != st.want {
				t.Errorf("%s: synced %s, want %s", st.name, got, st.want)
			}
		}
		if got, _, _ := loadCanon(t, dir); got != canon(t, l, dir) {
			t.Errorf("loaded\n%s\nwant\n%s", got, canon(t, l, dir))
		}
	}
}

// TestStateStoreSaveCostsTheSameWhateverTheMembers: with thousands of
// members, a hook's save appends a record of a few hundred bytes.
func TestStateStoreSaveCostsTheSameWhateverTheMembers(t *testing.T) {
	dir := t.TempDir()
	s := newStateStore(dir)
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	l.State = StateRunning
	l.createRelation(7, "db")
	for i := 0; i < 5000; i++ {
		l.setMember(7, fmt.Sprintf("bench/%d", i), int64(1000+i), nil)
	}
	s.rewrite = true // these in a snapshot, as after a restart
	if err := s.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	for i := 5000; i < 5010; i++ {
		unit := fmt.Sprintf("bench/%d", i)
		for _, st := range []string{stepRunning, stepDone} {
			l.Op = &hookOp{Hook: "db-relation-joined", Relation: 7, Endpoint: "db", Remote: unit, Step: st}
			before := s.journalBytes
			if err := s.commit(l, commitSynced); err != nil {
				t.Fatal(err)
			}
			if n := s.journalBytes - before; n <= 0 || n > 400 {
				t.Errorf("a save with 5,000 members wrote %d bytes, want a small record", n)
			}
		}
		l.Op = nil
		l.setMember(7, unit, 0, nil)
		if err := s.commit(l, commitSynced); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing new: nothing written.
	before := s.journalBytes
	if err := s.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	if s.journalBytes != before {
		t.Errorf("a save with nothing new wrote %d bytes", s.journalBytes-before)
	}
	got, loaded, _ := loadCanon(t, dir)
	if got != canon(t, l, dir) || len(loaded.Relations[7].Members) != 5010 {
		t.Errorf("loaded %d members, want 5010", len(loaded.Relations[7].Members))
	}
}

// TestStateStoreTornRecord cuts the journal's last record short at every
// byte, as a crash while appending it would: what loads is the state
// before it, and the next save starts afresh (a new snapshot) so that
// nothing follows the torn bytes.
func TestStateStoreTornRecord(t *testing.T) {
	dir := t.TempDir()
	want := states(t, 30)
	s := newStateStore(dir)
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 30; i++ {
		step(l, i)
		if err := s.commit(l, commitSynced); err != nil {
			t.Fatal(err)
		}
	}
	journal := filepath.Join(dir, journalName)
	data, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	last := strings.LastIndexByte(string(data[:len(data)-1]), '\n') + 1
	for cut := last + 1; cut < len(data); cut++ {
		if cut > last+12 && cut < len(data)-2 && cut%5 != 0 {
			continue // every byte of the checksum and the end, every fifth of the rest
		}
		torn := append([]byte(nil), data[:cut]...)
		if cut > last+20 && cut%3 == 0 {
			// The file's length reached the disk before its data did.
			for j := last + 12; j < cut; j++ {
				torn[j] = 0
			}
		}
		if err := os.WriteFile(journal, torn, 0o600); err != nil {
			t.Fatal(err)
		}
		got, l2, s2 := loadCanon(t, dir)
		if got != want[29] {
			t.Fatalf("cut at %d of %d: loaded a state other than the one before the torn record", cut, len(data))
		}
		if !s2.rewrite {
			t.Fatalf("cut at %d: a torn journal does not make the next save start afresh", cut)
		}
		step(l2, 30)
		if err := s2.commit(l2, commitSynced); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := loadCanon(t, dir); got != want[30] {
			t.Fatalf("cut at %d: the save after recovery did not load back", cut)
		}
		if fi, err := os.Stat(journal); err != nil || fi.Size() != 0 {
			t.Fatalf("cut at %d: the journal was not emptied after recovery (%v)", cut, err)
		}
		// As before the cut, for the next: the journal alone.
		if err := os.WriteFile(journal, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, snapshotName)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStateStoreCrashPoints stops a save at each point where a crash
// leaves the files in a state of their own, a snapshot's included, and
// loads: the state is the one before the save or the one after, and saving
// goes on from it.
func TestStateStoreCrashPoints(t *testing.T) {
	crash := errors.New("crash")
	for _, point := range []string{"journal-written", "snapshot-written", "snapshot-renamed"} {
		t.Run(point, func(t *testing.T) {
			dir := t.TempDir()
			want := states(t, 200)
			s := newStateStore(dir)
			s.compactMinBytes = 1 << 10
			l, err := s.load()
			if err != nil {
				t.Fatal(err)
			}
			crashes := 0
			for i := 1; i < len(want); i++ {
				step(l, i)
				s.crash = func(p string) error {
					if p == point {
						return crash
					}
					return nil
				}
				err := s.commit(l, commitSynced)
				if err == nil {
					continue
				}
				if !errors.Is(err, crash) {
					t.Fatal(err)
				}
				crashes++
				// The agent dies here; a new one loads what is on disk.
				got, l2, s2 := loadCanon(t, dir)
				switch {
				case got == want[i]:
				case got == want[i-1]:
					// The save did not happen: the agent redoes the step.
					step(l2, i)
				default:
					t.Fatalf("step %d, crashed at %s: loaded a state neither before nor after the save", i, point)
				}
				if point == "snapshot-written" && got != want[i-1] || point == "snapshot-renamed" && got != want[i] {
					t.Fatalf("step %d, crashed at %s: loaded the wrong side of the save", i, point)
				}
				l, s = l2, s2
				s.compactMinBytes = 1 << 10
				if err := s.commit(l, commitSynced); err != nil {
					t.Fatal(err)
				}
				if got, _, _ := loadCanon(t, dir); got != want[i] {
					t.Fatalf("step %d: the save after the crash did not load back", i)
				}
			}
			if crashes < 3 {
				t.Errorf("%d crashes at %s, want several", crashes, point)
			}
		})
	}
}

// TestStateStoreWriteFailure: an append that fails, leaving part of its
// record in the journal (the journal's first, which created the file, or
// a later one), is followed by a snapshot that empties the journal, and
// the agent, which goes on, saves and loads as before.
func TestStateStoreWriteFailure(t *testing.T) {
	for _, failAt := range []int{1, 7} {
		t.Run(fmt.Sprintf("save %d", failAt), func(t *testing.T) {
			dir := t.TempDir()
			journal := filepath.Join(dir, journalName)
			s := newStateStore(dir)
			l, err := s.load()
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 12; i++ {
				step(l, i)
				s.crash = func(p string) error {
					if i != failAt || p != "journal-written" {
						return nil
					}
					// The disk took only part of the record.
					fi, err := os.Stat(journal)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.Truncate(journal, fi.Size()-40); err != nil {
						t.Fatal(err)
					}
					return errors.New("no space left on device")
				}
				err := s.commit(l, commitSynced)
				if (err != nil) != (i == failAt) {
					t.Fatalf("save %d: %v", i, err)
				}
				if err != nil {
					// The agent tries the step again.
					if err := s.commit(l, commitSynced); err != nil {
						t.Fatalf("save %d again: %v", i, err)
					}
				}
				if got, _, _ := loadCanon(t, dir); got != canon(t, l, dir) {
					t.Fatalf("save %d: loaded another state", i)
				}
			}
		})
	}
}

// legacyState is a state.json of before the journal, as that agent wrote
// it: the whole state, members within their relations.
const legacyState = `{
  "state": "running",
  "charm": "front/3",
  "config_version": 12,
  "started": true,
  "op": {
    "hook": "db-relation-changed",
    "relation": 4,
    "endpoint": "db",
    "remote": "bench/1",
    "version": 99,
    "step": "running",
    "not_before": "0001-01-01T00:00:00Z"
  },
  "relations": {
    "4": {
      "endpoint": "db",
      "created": true,
      "in_scope": true,
      "members": {
        "bench/0": 17,
        "bench/1": 0
      }
    },
    "5": {
      "endpoint": "logs",
      "created": true
    }
  },
  "added_subordinates": {
    "5": "logger/2"
  }
}
`

// TestStateStoreLoadsTheOldStateFile loads a state.json of before the
// journal, and rewrites it in the new format at the first save.
func TestStateStoreLoadsTheOldStateFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, snapshotName), []byte(legacyState), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStateStore(dir)
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	if l.State != StateRunning || l.Charm != "front/3" || l.Spec != nil || l.Revision != 0 || !l.Started ||
		l.Op == nil || l.Op.Hook != "db-relation-changed" || l.Op.Step != stepRunning || l.Op.Version != 99 ||
		l.AddedSubordinates[5] != "logger/2" {
		t.Errorf("loaded %+v", l)
	}
	if lr := l.Relations[4]; lr == nil || !lr.InScope || lr.Endpoint != "db" || len(lr.Members) != 2 || lr.Members["bench/0"] != 17 {
		t.Errorf("relation 4 loaded as %+v", lr)
	}
	if lr := l.Relations[5]; lr == nil || lr.Members == nil || len(lr.Members) != 0 {
		t.Errorf("relation 5 loaded as %+v", lr)
	}
	before := canon(t, l, dir)
	// Nothing changed, but the first save writes the new format.
	if err := s.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, snapshotName))
	if err != nil {
		t.Fatal(err)
	}
	var snap snapshotFile
	if err := json.Unmarshal(data, &snap); err != nil || snap.Format != stateFormat || snap.Members[4]["bench/0"] != 17 {
		t.Fatalf("state.json after the first save = %s (%v)", data, err)
	}
	got, l2, s2 := loadCanon(t, dir)
	if got != before {
		t.Errorf("after migrating, loaded\n%s\nwant\n%s", got, before)
	}
	l2.setMember(4, "bench/2", 0, nil)
	if err := s2.commit(l2, commitSynced); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, journalName)); err != nil || fi.Size() == 0 {
		t.Errorf("a save after migrating did not go to the journal (%v)", err)
	}
	if got, _, _ := loadCanon(t, dir); got != canon(t, l2, dir) {
		t.Errorf("after a save to the journal, loaded\n%s\nwant\n%s", got, canon(t, l2, dir))
	}
}

// TestStateStoreDamage: what a crash cannot leave is reported, not
// loaded.
func TestStateStoreDamage(t *testing.T) {
	write := func(t *testing.T, dir, name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	newJournal := func(t *testing.T) (string, []byte) {
		dir := t.TempDir()
		s := newStateStore(dir)
		l, _ := s.load()
		for i := 1; i <= 5; i++ {
			step(l, i)
			if err := s.commit(l, commitSynced); err != nil {
				t.Fatal(err)
			}
		}
		data, err := os.ReadFile(filepath.Join(dir, journalName))
		if err != nil {
			t.Fatal(err)
		}
		return dir, data
	}
	t.Run("a bad record before the last", func(t *testing.T) {
		dir, data := newJournal(t)
		data[20] ^= 1
		write(t, dir, journalName, string(data))
		if _, err := newStateStore(dir).load(); err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("load = %v, want damaged", err)
		}
	})
	t.Run("a record missing", func(t *testing.T) {
		dir, data := newJournal(t)
		lines := strings.SplitAfter(string(data), "\n")
		write(t, dir, journalName, lines[0]+strings.Join(lines[2:], ""))
		if _, err := newStateStore(dir).load(); err == nil || !strings.Contains(err.Error(), "want 2") {
			t.Errorf("load = %v, want a record missing", err)
		}
	})
	t.Run("an unknown format", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, snapshotName, `{"format":4,"seq":1,"state":{}}`)
		if _, err := newStateStore(dir).load(); err == nil || !strings.Contains(err.Error(), "unknown format 4") {
			t.Errorf("load = %v, want an unknown format", err)
		}
	})
	t.Run("a torn snapshot", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, snapshotName, `{"format":2,"seq":1,"sta`)
		if _, err := newStateStore(dir).load(); err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("load = %v, want damaged", err)
		}
	})
}

// TestStateStoreKilled runs a process that saves state after state, the
// journal folded into snapshots every few dozen saves, and kills it with
// SIGKILL at random moments, 50 times: each time the state on disk loads
// whole, and is the last one the process said it saved or the one it was
// saving; the next process goes on from there.
func TestStateStoreKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	acked, cut, round := 0, 0, 0
	defer func() { t.Logf("%d rounds; %d killed in the middle of a save", round, cut) }()
	for ; round < 50; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStateStoreWriterProcess$")
		cmd.Env = append(os.Environ(), "LL_STATE_WRITER_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan int, 1<<16)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "saved ")); err == nil {
					lines <- n
				}
			}
		}()
		// Wait for the process to be saving, then let it run a while.
		select {
		case n, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatal("the writer process ended without saving")
			}
			acked = n
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the writer process saved nothing in 30 s")
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		for n := range lines {
			acked = n
		}
		cmd.Wait()
		_, l, s := loadCanon(t, dir)
		if s.rewrite {
			cut++ // a record cut short, or a snapshot written but the journal not yet emptied
		}
		got := int(l.Revision)
		if got != acked && got != acked+1 {
			t.Fatalf("round %d: loaded the state of step %d; the process had saved step %d", round, got, acked)
		}
		if canon(t, l, dir) != stateAt(t, got) {
			t.Fatalf("round %d: loaded a state other than step %d's", round, got)
		}
		if got >= writerSteps-200 {
			break
		}
	}
}

// writerSteps is how many steps TestStateStoreWriterProcess takes at most.
const writerSteps = 20000

// stateAt returns the state after steps 1..i from a new state, by the
// content canon gives.
func stateAt(t testing.TB, i int) string {
	l := newLocalState()
	for j := 1; j <= i; j++ {
		step(l, j)
	}
	return canon(t, l, "")
}

// TestStateStoreWriterProcess is the process TestStateStoreKilled kills:
// it goes on from the state in LL_STATE_WRITER_DIR, step after step,
// saying each step once saved.
func TestStateStoreWriterProcess(t *testing.T) {
	dir := os.Getenv("LL_STATE_WRITER_DIR")
	if dir == "" {
		t.Skip("run by TestStateStoreKilled")
	}
	s := newStateStore(dir)
	s.compactMinBytes = 2 << 10
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := int(l.Revision) + 1; i <= writerSteps; i++ {
		step(l, i)
		if err := s.commit(l, commitSynced); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "saved %d\n", i)
		w.Flush()
	}
}

// TestStateStoreSaveLater: a change left for later (commitLazy) is not on
// disk until the next save, or a flush (barrierSync) of a hook's end,
// writes it, with one synced record, or a settle (barrierSettle) once more
// than settleChanges members' changes are left, with one unsynced record.
// A flush, or a settle, with fewer such changes left writes nothing.
func TestStateStoreSaveLater(t *testing.T) {
	for _, then := range []string{"save", "flush", "settle"} {
		t.Run(then, func(t *testing.T) {
			dir := t.TempDir()
			s := newStateStore(dir)
			l, err := s.load()
			if err != nil {
				t.Fatal(err)
			}
			step(l, 1)
			if err := s.commit(l, commitSynced); err != nil {
				t.Fatal(err)
			}
			saved := canon(t, l, dir)
			records := s.seq
			for i := 2; i < 5; i++ {
				step(l, i)
				if err := s.commit(l, commitLazy); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.sync(barrierSync); err != nil || s.seq != records {
				t.Fatalf("a flush of changes left for later alone wrote %d records (%v)", s.seq-records, err)
			}
			if got, _, _ := loadCanon(t, dir); got != saved {
				t.Fatalf("a change left for later is on disk:\n%s\nwant\n%s", got, saved)
			}
			switch then {
			case "save":
				step(l, 5)
				err = s.commit(l, commitSynced)
			case "flush":
				step(l, 5)
				if err = s.commit(l, commitWritten); err == nil {
					records++ // the hook's end is a record of its own
					step(l, 6)
					if err = s.commit(l, commitLazy); err == nil {
						err = s.sync(barrierSync)
					}
				}
			case "settle":
				if err := s.sync(barrierSettle); err != nil || s.seq != records {
					t.Fatalf("a settle of a few changes left for later wrote %d records (%v)", s.seq-records, err)
				}
				s.settleChanges = len(l.changes) + 2
				for i := 0; i < 3; i++ {
					l.setMember(1, fmt.Sprintf("many/%d", i), 1, nil)
				}
				err = s.sync(barrierSettle)
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.unsynced || s.later != nil {
				t.Errorf("after the %s: unsynced %v, left for later %v", then, s.unsynced, s.later != nil)
			}
			if s.seq != records+1 {
				t.Errorf("the %s wrote %d records, want 1", then, s.seq-records)
			}
			if got, _, _ := loadCanon(t, dir); got != canon(t, l, dir) {
				t.Errorf("loaded\n%s\nwant\n%s", got, canon(t, l, dir))
			}
			for _, b := range []barrier{barrierSync, barrierSettle} {
				if err := s.sync(b); err != nil || s.seq != records+1 {
					t.Errorf("a flush or settle with nothing left wrote %d records (%v)", s.seq-records-1, err)
				}
			}
		})
	}
}
