package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// endThread runs fn on a goroutine locked to its thread and returns without unlocking, so the
// runtime ends that thread, as store/chdb's engine thread does on Close. Not the main thread,
// which the runtime parks rather than ends.
func endThread(fn func()) {
	done := make(chan struct{})
	var run func()
	run = func() {
		runtime.LockOSThread()
		if syscall.Gettid() == syscall.Getpid() {
			go run()
			runtime.UnlockOSThread()
			return
		}
		fn()
		close(done)
	}
	go run()
	<-done
}

// alive says whether pid is running and not a zombie waiting to be reaped.
func alive(p *Process) bool {
	select {
	case <-p.Done():
		return false
	default:
		return syscall.Kill(p.Cmd.Process.Pid, 0) == nil
	}
}

// The mechanism Start guards against: a child forked by a thread that then ends is killed.
func TestParentDeathSignalFollowsTheForkingThread(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	endThread(func() {
		if err := cmd.Start(); err != nil {
			t.Error(err)
		}
	})
	if cmd.Process == nil {
		t.FailNow()
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child of an ended thread exited with %v, want killed by SIGKILL", err)
	}
}

// A child from Start outlives every thread that ends after it, and dies when killed.
func TestStartedChildOutlivesEndingThreads(t *testing.T) {
	p, err := Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	// Many threads end, some started before the child and some after, with goroutines moving
	// between the rest meanwhile; without Start's locked thread the forking thread is one of them.
	for i := 0; i < 200; i++ {
		endThread(func() { runtime.Gosched() })
	}
	// The kernel's signal is sent as the thread exits; give a killed child time to be reaped.
	time.Sleep(200 * time.Millisecond)
	if !alive(p) {
		t.Fatalf("the child died with a thread of ours: %v", p.Wait())
	}
	if err := p.Kill(); err == nil {
		t.Fatal("a killed child reports a clean exit")
	}
	if alive(p) {
		t.Fatal("the child lives on after Kill")
	}
}

func TestStartReportsWhatCannotStart(t *testing.T) {
	if _, err := Start(exec.Command("/nonexistent/peertrail-child")); err == nil {
		t.Fatal("a missing binary started")
	}
}
