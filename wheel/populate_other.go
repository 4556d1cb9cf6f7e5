//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package wheel

const mapPopulate = 0
