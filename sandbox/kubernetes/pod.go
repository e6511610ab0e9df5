package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Pod is one sandbox's running pod. It is the driver.Instance that Start
// returns; its extra methods are reachable by type assertion.
type Pod struct {
	d    *Driver
	p    *plan
	iso  driver.Isolation
	conn *stream

	done    chan struct{}
	doneMu  sync.Once
	cancel  context.CancelFunc // stops the watcher and the attach stream
	wg      sync.WaitGroup
	mu      sync.Mutex
	exitErr error
	paused  bool

	closeOnce sync.Once
	closeErr  error
}

// launch creates the policy and the pod, waits until it runs, attaches and
// bootstraps the agent. Nothing half-made stays behind on failure.
func (d *Driver) launch(ctx context.Context, p *plan) (_ *Pod, err error) {
	pods := d.cs.CoreV1().Pods(p.namespace)
	if !p.cfg.Network {
		// Created first: the pod never runs without it.
		if _, err := d.cs.NetworkingV1().NetworkPolicies(p.namespace).Create(ctx, networkPolicy(p), metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, driver.Errorf(driver.CodeExists, err, fmt.Sprintf(
					"a NetworkPolicy named %s already exists (a sandbox with id %q is running or was left behind); use another sandbox id, or remove leftovers with `sandboxkit gc`",
					p.name, p.cfg.ID))
			}
			return nil, d.apiError("creating the sandbox's deny-all NetworkPolicy", err)
		}
		defer func() {
			if err != nil {
				d.deletePolicy(context.WithoutCancel(ctx), p)
			}
		}()
	}
	// After the first API call, so that a cluster that is down is
	// reported before a slow agent build.
	ag, err := findAgent(ctx, p.agent)
	if err != nil {
		return nil, err
	}
	created, err := pods.Create(ctx, podSpec(p, ag), metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, driver.Errorf(driver.CodeExists, err, fmt.Sprintf(
				"a pod named %s already exists (a sandbox with id %q is running or was left behind); use another sandbox id, or remove leftovers with `sandboxkit gc`",
				p.name, p.cfg.ID))
		}
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			return nil, driver.Errorf(driver.CodeInvalidArgument, err, "the cluster refused the sandbox's pod spec; check the kubernetes options")
		}
		if apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "cannot create resource") {
			// An admission policy (Pod Security, OPA, quota) said no.
			return nil, driver.Errorf(driver.CodeIsolationUnavailable, err, "an admission policy of namespace "+p.namespace+" refused the sandbox's pod; read the reason and adjust the policy or the options")
		}
		return nil, d.apiError("creating the sandbox pod", err)
	}
	defer func() {
		if err != nil {
			d.deletePod(context.WithoutCancel(ctx), p, false)
		}
	}()
	running, err := d.waitRunning(ctx, p, created.ResourceVersion)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pod := &Pod{d: d, p: p, done: make(chan struct{}), cancel: cancel}
	defer func() {
		if err != nil {
			cancel()
			if pod.conn != nil {
				pod.conn.Close()
			}
			pod.wg.Wait()
			pod.doneMu.Do(func() { close(pod.done) })
		}
	}()
	s, err := d.attach(lctx, p, &pod.wg, pod.streamEnded)
	if err != nil {
		return nil, err
	}
	pod.conn = s
	host := "-"
	if !p.cfg.Network {
		host = running.Status.HostIP
		if host == "" {
			host = "none"
		}
	}
	br, err := s.bootstrap(ctx, ag, host, d.waitDeathReason(p))
	if err != nil {
		return nil, err
	}
	nv := br.net
	if !p.cfg.Network && !nv.blocked && !p.acceptOpen {
		return nil, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
			"the cluster does not enforce the sandbox's deny-all NetworkPolicy (measured from inside the pod: %s); "+
				"use a network plugin that enforces NetworkPolicy (Calico, Cilium, ...), allow network by config, "+
				"or accept this by name with the kubernetes option %s=true",
			strings.TrimPrefix(nv.detail, "open: "), OptAcceptNetwork))
	}
	pod.iso = d.isolation(p, running, ag, br)
	pod.wg.Add(1)
	go pod.watch(lctx, running.ResourceVersion)
	return pod, nil
}

// waitRunning watches the pod until it runs, turning what keeps it from
// running into a coded error that says what to do.
func (d *Driver) waitRunning(ctx context.Context, p *plan, rv string) (*corev1.Pod, error) {
	pods := d.cs.CoreV1().Pods(p.namespace)
	sel := fields.OneTermEqualSelector("metadata.name", p.name).String()
	var last *corev1.Pod
	for {
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
		if err != nil {
			return nil, d.notRunning(ctx, p, last, err)
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return nil, driver.Errorf(driver.CodeDead, nil, "the sandbox pod was deleted while starting (by `sandboxkit gc` or another client); retry")
			case watch.Error:
				continue
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			last, rv = pod, pod.ResourceVersion
			if pod.Status.Phase == corev1.PodRunning {
				w.Stop()
				return pod, nil
			}
			if err := startFailure(p, pod); err != nil {
				w.Stop()
				return nil, err
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, d.notRunning(ctx, p, last, ctx.Err())
		}
	}
}

// startFailure says why pod will never run, or nil while it may still.
func startFailure(p *plan, pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return podDeath(p, pod, "")
	}
	for _, cs := range pod.Status.ContainerStatuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
			hint := "check the image name, give pull credentials (kubernetes option " + OptPullSecrets + "), or load the image on the nodes"
			if w.Reason == "ErrImageNeverPull" {
				hint = "the pull policy is Never and the node lacks the image: load it on the nodes or allow pulls"
			}
			return driver.Errorf(driver.CodeNotFound, nil, fmt.Sprintf("the node cannot get image %q (%s: %s); %s", p.image, w.Reason, w.Message, hint))
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return driver.Errorf(driver.CodeBackend, nil, fmt.Sprintf("the node cannot start the sandbox container (%s: %s); check the image and the node's container runtime", w.Reason, w.Message))
		}
	}
	return nil
}

// notRunning explains a pod that did not run within the start deadline:
// unschedulable, or stuck on the node (the last warning event says why).
func (d *Driver) notRunning(ctx context.Context, p *plan, last *corev1.Pod, cause error) error {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if !errors.Is(cause, context.DeadlineExceeded) && !errors.Is(cause, context.Canceled) {
		return d.apiError("watching the sandbox pod start", cause)
	}
	if last != nil {
		for _, c := range last.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return driver.Errorf(driver.CodeBackend, cause, fmt.Sprintf(
					"the cluster cannot schedule the sandbox pod: %s; add or free nodes matching the node selector and tolerations, or lower the memory/CPU asked for",
					c.Message))
			}
		}
	}
	msg := "the sandbox pod did not start in time"
	if ev := d.lastWarning(ectx, p); ev != "" {
		msg += " (last event: " + ev + ")"
	} else if last != nil && last.Spec.NodeName == "" {
		msg += " (not scheduled yet: is a scheduler running?)"
	}
	return driver.Errorf(driver.CodeTimeout, cause, msg+"; check `kubectl -n "+p.namespace+" describe pod "+p.name+"` and retry with a longer deadline")
}

// lastWarning returns the newest warning event about p's pod.
func (d *Driver) lastWarning(ctx context.Context, p *plan) string {
	evs, err := d.cs.CoreV1().Events(p.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.name", p.name),
			fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String(),
	})
	if err != nil || len(evs.Items) == 0 {
		return ""
	}
	e := evs.Items[len(evs.Items)-1]
	return e.Reason + ": " + e.Message
}

// podDeath is the coded error for a pod that stopped running.
func podDeath(p *plan, pod *corev1.Pod, agentSaid string) error {
	detail := ""
	if agentSaid != "" {
		detail = "; agent said: " + agentSaid
	}
	switch pod.Status.Reason {
	case "Evicted":
		return driver.Errorf(driver.CodeDead, nil, fmt.Sprintf(
			"the node evicted the sandbox pod (%s); the node ran short of memory or disk: give sandboxes smaller limits or larger nodes, then create a new sandbox%s",
			pod.Status.Message, detail))
	case "DeadlineExceeded":
		return driver.Errorf(driver.CodeDead, nil, fmt.Sprintf(
			"the sandbox pod reached its hard deadline (activeDeadlineSeconds %d); raise it with the kubernetes option %s and create a new sandbox%s",
			int64(p.deadline/time.Second), OptDeadline, detail))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil {
			continue
		}
		switch {
		case t.Reason == "OOMKilled":
			return driver.Errorf(driver.CodeDead, nil, fmt.Sprintf(
				"the sandbox pod was killed by the OOM killer (memory limit %d bytes, files in /tmp and the workspace included); raise Limits.MemoryBytes or use less memory, then create a new sandbox%s",
				p.cfg.Limits.MemoryBytes, detail))
		case t.ExitCode == 97 || t.ExitCode == 98:
			return driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
				"the image %q cannot receive the agent (exit %d: it needs /bin/sh with head, chmod and wc); use an image with a POSIX shell and coreutils or busybox%s",
				p.image, t.ExitCode, detail))
		case t.ExitCode == 137 || t.Signal == 9:
			return driver.Errorf(driver.CodeDead, nil, "the sandbox pod's agent was killed (SIGKILL); create a new sandbox"+detail)
		default:
			return driver.Errorf(driver.CodeDead, nil, fmt.Sprintf("the sandbox pod's agent exited with status %d (%s %s); create a new sandbox%s",
				t.ExitCode, t.Reason, strings.TrimSpace(t.Message), detail))
		}
	}
	return driver.Errorf(driver.CodeDead, nil, fmt.Sprintf("the sandbox pod stopped (phase %s %s); create a new sandbox%s", pod.Status.Phase, pod.Status.Reason, detail))
}

// waitDeathReason returns a function that, after the stream ended during
// the bootstrap, waits a little for the pod's final status and explains it.
func (d *Driver) waitDeathReason(p *plan) func(agentSaid string) error {
	return func(agentSaid string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			pod, err := d.cs.CoreV1().Pods(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil {
				break
			}
			if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
				return podDeath(p, pod, agentSaid)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return driver.Errorf(driver.CodeDead, nil, "the sandbox pod's attach stream ended during start; agent said: "+agentSaid)
	}
}

// attach opens the pod's attach stream (WebSocket, or SPDY for older API
// servers) with stdin, stdout and stderr.
func (d *Driver) attach(ctx context.Context, p *plan, wg *sync.WaitGroup, ended func(*stream)) (*stream, error) {
	u := d.cs.CoreV1().RESTClient().Post().Namespace(p.namespace).Resource("pods").Name(p.name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: containerName, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	ex, err := newExecutor(d, u.String(), http.MethodPost)
	if err != nil {
		return nil, driver.Errorf(driver.CodeBackend, err, "cannot set up the attach stream to the sandbox pod")
	}
	return newStream(ctx, ex, wg, ended), nil
}

func newExecutor(d *Driver, url, method string) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(d.rest, http.MethodGet, url)
	if err != nil {
		return nil, err
	}
	u, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	sp, err := remotecommand.NewSPDYExecutor(d.rest, method, u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// stream is the agent's byte stream over the attach connection.
type stream struct {
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	r       *bufio.Reader // stdout, past the bootstrap lines
	once    sync.Once

	mu   sync.Mutex
	tail []byte // last bytes the agent wrote to stderr
	end  chan struct{}
	err  error
}

const stderrTailBytes = 2 << 10

func newStream(ctx context.Context, ex remotecommand.Executor, wg *sync.WaitGroup, ended func(*stream)) *stream {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &stream{stdinW: inW, stdoutR: outR, r: bufio.NewReaderSize(outR, 64<<10), end: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: tailWriter{s}})
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(io.ErrClosedPipe)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.end)
		if ended != nil {
			ended(s)
		}
	}()
	return s
}

// bootstrap sends the header and the agent binary, then reads the
// bootstrap's report lines up to SBX-READY. After it, the stream carries
// only the agent protocol. dead explains an early end of the stream.
func (s *stream) bootstrap(ctx context.Context, ag *agentBin, host string, dead func(string) error) (bootReport, error) {
	var br bootReport
	werr := make(chan error, 1)
	go func() {
		hdr := fmt.Sprintf("%d %s %d\n", len(ag.data), host, kubeletPort)
		_, err := s.stdinW.Write(append([]byte(hdr), ag.data...))
		werr <- err
	}()
	type line struct {
		s   string
		err error
	}
	lines := make(chan line, 1)
	go func() {
		for {
			l, err := s.r.ReadString('\n')
			lines <- line{strings.TrimRight(l, "\n"), err}
			if err != nil || l == "SBX-READY\n" {
				close(lines)
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			s.Close()
			for range lines {
			}
			return br, driver.Errorf(driver.CodeTimeout, ctx.Err(), "the sandbox pod did not take the agent in time; retry with a longer deadline")
		case l, ok := <-lines:
			if !ok {
				return br, nil
			}
			if l.err != nil {
				return br, dead(s.stderrTail())
			}
			switch {
			case l.s == "SBX-READY":
				if err := <-werr; err != nil {
					return br, driver.Errorf(driver.CodeBackend, err, "sending the agent into the sandbox pod failed")
				}
			case strings.HasPrefix(l.s, "SBX-NET "):
				br.net.detail = strings.TrimPrefix(l.s, "SBX-NET ")
				br.net.measured = !strings.HasPrefix(br.net.detail, "unknown")
				br.net.blocked = strings.HasPrefix(br.net.detail, "blocked")
			case strings.HasPrefix(l.s, "SBX-NPROC "):
				br.nproc, _ = strconv.Atoi(strings.TrimPrefix(l.s, "SBX-NPROC "))
			case strings.HasPrefix(l.s, "SBX-NOFILE "):
				br.nofile, _ = strconv.Atoi(strings.TrimPrefix(l.s, "SBX-NOFILE "))
			case strings.HasPrefix(l.s, "SBX-FSIZE "):
				br.fsize, _ = strconv.ParseInt(strings.TrimPrefix(l.s, "SBX-FSIZE "), 10, 64)
			case l.s == "SBX-SECCOMP ok":
				br.seccomp = seccompFilter(ag.arch)
			case l.s == "SBX-SECCOMP none":
			case strings.HasPrefix(l.s, "SBX-SECCOMP "):
				// The filter was sent and not installed: a control
				// asked for is missing.
				s.Close()
				for range lines {
				}
				return br, driver.Errorf(driver.CodeIsolationUnavailable, nil, "the sandbox's seccomp filter could not be installed in the pod ("+
					strings.TrimPrefix(l.s, "SBX-SECCOMP ")+"); the node's kernel or runtime refuses stacked seccomp filters")
			default:
				// Not ours (a shell profile printing): the stream is not
				// clean, and the protocol would misread it.
				s.Close()
				for range lines {
				}
				return br, driver.Errorf(driver.CodeIsolationUnavailable, nil, fmt.Sprintf(
					"the image printed %q before the agent started; use an image whose /bin/sh prints nothing", l.s))
			}
		}
	}
}

func (s *stream) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *stream) Write(p []byte) (int, error) { return s.stdinW.Write(p) }

// Close ends the agent's stdin (it exits on EOF); the attach connection
// ends when the container's stdout does.
func (s *stream) Close() error {
	s.once.Do(func() {
		s.stdinW.Close()
		s.stdoutR.Close()
	})
	return nil
}

func (s *stream) stderrTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(string(s.tail))
}

type tailWriter struct{ s *stream }

func (w tailWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.tail = append(w.s.tail, p...)
	if len(w.s.tail) > stderrTailBytes {
		w.s.tail = append([]byte(nil), w.s.tail[len(w.s.tail)-stderrTailBytes:]...)
	}
	return len(p), nil
}

// streamEnded runs when the attach stream is over: the agent is gone (its
// stdin closed, it exited or was killed) or the connection broke, which
// with stdinOnce also ends the agent.
func (pd *Pod) streamEnded(s *stream) {
	go func() {
		// Give the pod's final status (OOMKilled, evicted) a moment to
		// arrive through the watch, which explains better.
		select {
		case <-pd.done:
			return
		case <-time.After(2 * time.Second):
		}
		pd.die(driver.Errorf(driver.CodeDead, nil, "the sandbox pod's attach stream ended (the agent exited or the connection to the cluster broke); create a new sandbox; agent said: "+s.stderrTail()))
	}()
}

// watch follows the pod until it stops, recording why.
func (pd *Pod) watch(ctx context.Context, rv string) {
	defer pd.wg.Done()
	pods := pd.d.cs.CoreV1().Pods(pd.p.namespace)
	sel := fields.OneTermEqualSelector("metadata.name", pd.p.name).String()
	for ctx.Err() == nil {
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				rv = ""
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = pod.ResourceVersion
			if ev.Type == watch.Deleted {
				w.Stop()
				pd.die(driver.Errorf(driver.CodeDead, nil, "the sandbox pod was deleted (by `sandboxkit gc`, kubectl or the cluster); create a new sandbox"))
				return
			}
			if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
				w.Stop()
				pd.die(podDeath(pd.p, pod, pd.conn.stderrTail()))
				return
			}
		}
		w.Stop()
	}
}

// die records why the sandbox ended (the first reason wins) and closes Done.
func (pd *Pod) die(err error) {
	pd.mu.Lock()
	if pd.exitErr == nil {
		pd.exitErr = err
	}
	pd.mu.Unlock()
	pd.doneMu.Do(func() { close(pd.done) })
}

// Name returns the pod's name.
func (pd *Pod) Name() string { return pd.p.name }

// Namespace returns the pod's namespace.
func (pd *Pod) Namespace() string { return pd.p.namespace }

// Conn returns the agent's stream: the pod's stdin for writing, its stdout
// for reading. Closing it closes the agent's stdin, which makes it exit.
func (pd *Pod) Conn() io.ReadWriteCloser { return pd.conn }

// Isolation reports what was applied to this pod.
func (pd *Pod) Isolation() driver.Isolation {
	iso := pd.iso
	iso.Controls = append([]driver.Control(nil), pd.iso.Controls...)
	iso.Gaps = append([]string(nil), pd.iso.Gaps...)
	iso.Extra = make(map[string]string, len(pd.iso.Extra))
	for k, v := range pd.iso.Extra {
		iso.Extra[k] = v
	}
	return iso
}

// Done is closed when the pod has stopped or its stream has ended.
func (pd *Pod) Done() <-chan struct{} { return pd.done }

// Err says why the sandbox died, once Done is closed: nil after Close,
// else a *driver.Error with code DEAD naming the cause (OOM kill,
// eviction, deadline).
func (pd *Pod) Err() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.exitErr == errClosed {
		return nil
	}
	return pd.exitErr
}

// errClosed marks a pod that ended because it was closed.
var errClosed = driver.Errorf(driver.CodeDead, nil, "the sandbox was closed")

func (pd *Pod) alive() error {
	select {
	case <-pd.done:
		if err := pd.Err(); err != nil {
			return err
		}
		return driver.Errorf(driver.CodeDead, nil, "the sandbox pod is gone; create a new sandbox")
	default:
		return nil
	}
}

// Pause stops every process of the sandbox except the agent (SIGSTOP to
// every process the sandbox's uid may signal in the pod's pid namespace,
// sent with one exec). The agent then serves no call until Resume; package
// sandbox refuses calls while paused anyway.
func (pd *Pod) Pause(ctx context.Context) error {
	if err := pd.alive(); err != nil {
		return err
	}
	if err := pd.signalAll(ctx, "STOP"); err != nil {
		return err
	}
	pd.mu.Lock()
	pd.paused = true
	pd.mu.Unlock()
	return nil
}

// Resume continues every process stopped by Pause.
func (pd *Pod) Resume(ctx context.Context) error {
	if err := pd.alive(); err != nil {
		return err
	}
	if err := pd.signalAll(ctx, "CONT"); err != nil {
		return err
	}
	pd.mu.Lock()
	pd.paused = false
	pd.mu.Unlock()
	return nil
}

// signalAll runs `kill -SIG -1` in the pod: kill(-1) reaches every process
// the caller may signal in its pid namespace except PID 1 (the agent) and
// itself, and the kernel walks the task list under a lock that fork also
// takes, so no process forked during the walk escapes it.
func (pd *Pod) signalAll(ctx context.Context, sig string) error {
	u := pd.d.cs.CoreV1().RESTClient().Post().Namespace(pd.p.namespace).Resource("pods").Name(pd.p.name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: []string{"/bin/sh", "-c", "kill -" + sig + " -1"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	ex, err := newExecutor(pd.d, u.String(), http.MethodPost)
	if err != nil {
		return driver.Errorf(driver.CodeBackend, err, "cannot set up an exec into the sandbox pod")
	}
	// Two buffers: client-go copies stdout and stderr concurrently.
	var out, errOut bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		return pd.d.apiError(fmt.Sprintf("sending SIG%s to the sandbox's processes (needs pods/exec): %s", sig, strings.TrimSpace(out.String()+errOut.String())), err)
	}
	return nil
}

// Close ends the agent's stream and deletes the pod and its NetworkPolicy.
// It is idempotent and returns when the pod is gone from the cluster (its
// processes are dead then: the kubelet confirms that before the API server
// forgets the pod).
func (pd *Pod) Close(ctx context.Context) error {
	pd.closeOnce.Do(func() { pd.closeErr = pd.destroy(ctx) })
	return pd.closeErr
}

func (pd *Pod) destroy(ctx context.Context) error {
	pd.mu.Lock()
	if pd.exitErr == nil {
		pd.exitErr = errClosed
	}
	paused := pd.paused
	pd.mu.Unlock()
	if paused {
		// Stopped processes die only once they get SIGKILL, which the
		// kubelet sends; SIGCONT first lets the agent's own cleanup run.
		_ = pd.signalAll(ctx, "CONT")
	}
	pd.conn.Close()
	err := pd.d.deletePod(ctx, pd.p, true)
	if !pd.p.cfg.Network {
		if perr := pd.d.deletePolicy(ctx, pd.p); err == nil {
			err = perr
		}
	}
	pd.cancel()
	pd.wg.Wait()
	pd.doneMu.Do(func() { close(pd.done) })
	return err
}

// deletePod deletes p's pod and, when wait is set, waits until the API
// server no longer has it.
func (d *Driver) deletePod(ctx context.Context, p *plan, wait bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pods := d.cs.CoreV1().Pods(p.namespace)
	// A grace period (not 0) keeps the pod object until the kubelet has
	// killed its containers, so "gone" means no process survives; 1 s is
	// enough since the agent exits as soon as its stdin closes.
	grace := int64(1)
	bg := metav1.DeletePropagationBackground
	err := pods.Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &bg})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return d.apiError("deleting the sandbox pod", err)
	}
	if !wait {
		return nil
	}
	sel := fields.OneTermEqualSelector("metadata.name", p.name).String()
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return d.apiError("waiting for the sandbox pod to go", err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return d.apiError("waiting for the sandbox pod to go", err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return d.apiError("waiting for the sandbox pod to go", ctx.Err())
		}
	}
}

func (d *Driver) deletePolicy(ctx context.Context, p *plan) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := d.cs.NetworkingV1().NetworkPolicies(p.namespace).Delete(ctx, p.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return d.apiError("deleting the sandbox's NetworkPolicy", err)
	}
	return nil
}
