# Copyright 2026 The InfiniFlow Authors. All Rights Reserved.
