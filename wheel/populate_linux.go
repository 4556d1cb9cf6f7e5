package wheel

import "syscall"

const mapPopulate = syscall.MAP_POPULATE
