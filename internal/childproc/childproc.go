// Package childproc starts child processes that are killed when this process dies.
//
// Linux sends a child its parent-death signal (Pdeathsig) when the thread that forked it
// exits, not when the process does, and the Go runtime ends a thread whenever a goroutine
// locked to it returns without unlocking (store/chdb's engine thread does so on Close). A
// child forked from such a thread was SIGKILLed at that moment, silently. Start forks from a
// thread locked for the child's whole life, so the signal comes only with the process.
//
// Concurrency: a Process may be waited on from any number of goroutines.
// Lifecycle: Start starts the child; it is reaped once it exits, and Done is closed then.
// Ownership: the Cmd is the caller's to configure before Start and to read (Process.Pid, its
// output) after; its Wait is called by Start's goroutine, never by the caller.
package childproc

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
)

// Process is a started child.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd with SIGKILL as its parent-death signal, from an OS thread that stays
// locked until the child has exited and been reaped.
func Start(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only after the child is reaped: the thread then goes back to the pool.
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return p, nil
}

// Done is closed once the child has exited and its output has been copied.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the child has exited and returns what exec.Cmd.Wait returned.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Kill sends the child SIGKILL and waits for it to be reaped.
func (p *Process) Kill() error {
	_ = p.Cmd.Process.Kill()
	return p.Wait()
}
