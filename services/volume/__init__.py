"""volume: pod volume setup and teardown (volume types arrive with the volume issue)."""
