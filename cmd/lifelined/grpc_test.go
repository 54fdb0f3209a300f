package main_test

import "google.golang.org/grpc"

func waitForReady() []grpc.CallOption { return []grpc.CallOption{grpc.WaitForReady(true)} }
