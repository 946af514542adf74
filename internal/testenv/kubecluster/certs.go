package kubecluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificates, written as PEM files into dir: one
// certificate authority signs every serving and client certificate.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
}

// certSpec is one certificate to issue.
type certSpec struct {
	name   string // the files' base name: name.crt, name.key
	cn     string
	orgs   []string
	server bool // a serving certificate (with the SANs below) or a client one
	dns    []string
	ips    []net.IP
}

// newPKI creates the authority in dir (ca.crt, ca.key), the service-account
// signing key (sa.key, sa.pub) and every component's certificate.
func newPKI(dir string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "berth-kubecluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key}
	if err := p.write("ca", der, key); err != nil {
		return nil, err
	}
	// The service-account tokens' signing key: RSA, which every
	// Kubernetes component accepts.
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	for _, s := range []certSpec{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips: append(loopback, net.IPv4(10, 96, 0, 1))},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{name: "admin", cn: "berth-admin", orgs: []string{"system:masters"}},
		{name: "controller-manager", cn: "system:kube-controller-manager", orgs: []string{"system:masters"}}, // its controllers run as itself (no service-account credentials)
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "kubelet-client", cn: "system:node:" + NodeName, orgs: []string{"system:nodes"}},
		{name: "kubelet", cn: "system:node:" + NodeName, server: true, dns: []string{NodeName}, ips: loopback},
	} {
		if err := p.issue(s); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", s.name, err)
		}
	}
	return p, nil
}

// issue writes s.name.crt and s.name.key signed by the authority.
func (p *pki) issue(s certSpec) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     s.dns,
		IPAddresses:  s.ips,
	}
	if s.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	return p.write(s.name, der, key)
}

func (p *pki) write(name string, der []byte, key crypto.Signer) error {
	if err := os.WriteFile(p.path(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return writeKey(p.path(name+".key"), key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// path is the file name in the certificates' directory.
func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }
