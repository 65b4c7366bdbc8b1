#!/bin/sh
echo "hello from the team workspace"
