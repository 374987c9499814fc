"""The numpy engine the course's chapters import."""
