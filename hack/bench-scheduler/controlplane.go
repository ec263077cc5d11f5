package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Ports of their own, so the benchmark does not clash with the local
// cluster (etcd 12379, API server 6443) and needs no cluster lock.
const (
	etcdClientPort = 23790
	etcdPeerPort   = 23800
	apiServerPort  = 16443
	schedulerPort  = 16459
)

type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
}

// start runs a command with its output in logPath, in its own process
// group so that stop ends it and only it.
func start(dir, name, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after 10 s.
func (p *process) stop() {
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

type controlPlane struct {
	dir        string
	token      string
	kubeconfig string
	etcd, api  *process
}

// startControlPlane starts etcd and kube-apiserver with fresh data in dir.
func startControlPlane(ctx context.Context, cfg config, dir string) (*controlPlane, error) {
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		return nil, err
	}
	cp := &controlPlane{dir: dir}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	cp.token = hex.EncodeToString(tok)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(cp.token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saKey := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	cp.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cp.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: bench
  context: {cluster: bench, user: admin}
current-context: bench
`, apiServerPort, cp.token)), 0o600); err != nil {
		return nil, err
	}

	cp.etcd, err = start(dir, "etcd", cfg.etcd, "--name=bench", "--data-dir="+filepath.Join(dir, "etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdClientPort),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdClientPort),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeerPort),
		fmt.Sprintf("--initial-cluster=bench=http://127.0.0.1:%d", etcdPeerPort),
		"--unsafe-no-fsync", "--quota-backend-bytes=4294967296", "--log-level=warn")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, cp.etcd, fmt.Sprintf("http://127.0.0.1:%d/health", etcdClientPort), "", time.Minute); err != nil {
		cp.stop()
		return nil, fmt.Errorf("etcd: %w (log: %s)", err, cp.etcd.logPath)
	}
	// No ServiceAccount admission: there is no controller-manager to create
	// the default service account, and pods never run.
	cp.api, err = start(dir, "kube-apiserver", filepath.Join(cfg.kubeBin, "kube-apiserver"),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClientPort),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiServerPort),
		"--cert-dir="+filepath.Join(dir, "certs"), "--endpoint-reconciler-type=none",
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"), "--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.97.0.0/16", "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey, "--service-account-signing-key-file="+saKey,
		"--disable-admission-plugins=ServiceAccount", "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
		"--v=1")
	if err != nil {
		cp.stop()
		return nil, err
	}
	if err := waitHTTP(ctx, cp.api, fmt.Sprintf("https://127.0.0.1:%d/readyz", apiServerPort), cp.token, 3*time.Minute); err != nil {
		cp.stop()
		return nil, fmt.Errorf("kube-apiserver: %w (log: %s)", err, cp.api.logPath)
	}
	return cp, nil
}

func (cp *controlPlane) stop() {
	cp.api.stop()
	cp.etcd.stop()
}

func (cp *controlPlane) client() (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(&rest.Config{
		Host: fmt.Sprintf("https://127.0.0.1:%d", apiServerPort), BearerToken: cp.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 5000, Burst: 5000,
	})
}

// startScheduler starts the stock kube-scheduler or tangram-scheduler with
// the same client settings and one profile named default-scheduler, so the
// very same pods go to either.
func (cp *controlPlane) startScheduler(ctx context.Context, cfg config, which string) (*process, error) {
	profile := ""
	bin := filepath.Join(cfg.kubeBin, "kube-scheduler")
	if which == "tangram" {
		bin = cfg.tangram
		profile = fmt.Sprintf(`    plugins:
      preScore: {enabled: [{name: TangramPacking}]}
      score: {enabled: [{name: TangramPacking, weight: 5}]}
      reserve: {enabled: [{name: TangramPacking}]}
    pluginConfig:
      - name: TangramPacking
        args: {policy: %s}
`, cfg.policy)
	}
	config := filepath.Join(cp.dir, which+"-scheduler.yaml")
	// The client's QPS is raised as in scheduler_perf, so the API client is
	// not what limits either scheduler.
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: %q, qps: 5000, burst: 5000}
leaderElection: {leaderElect: false}
profiles:
  - schedulerName: default-scheduler
%s`, cp.kubeconfig, profile)), 0o600); err != nil {
		return nil, err
	}
	p, err := start(cp.dir, which+"-scheduler", bin, "--config="+config,
		"--authentication-kubeconfig="+cp.kubeconfig, "--authorization-kubeconfig="+cp.kubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedulerPort), "--v=1")
	if err != nil {
		return nil, err
	}
	return p, nil
}

// waitHTTP polls url until it answers 200 or the process exits.
func waitHTTP(ctx context.Context, p *process, url, token string, limit time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("exited while starting")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %s", limit)
}
