package checkpoint

import "fmt"

// This file holds the pickle allowlist: the globals a checkpoint may name,
// and Go implementations of the few that may be called. Nothing else is ever
// resolved or run.

type globalKind int

const (
	gOrderedDict globalKind = iota + 1
	gRebuildTensor
	gRebuildTensorV2
	gRebuildParameter
	gRebuildParameterWithState
	gRebuildFromTypeV2
	gStorageClass
	gTensorType // torch.Tensor, torch.nn.parameter.Parameter: only as new_type
	gDType      // torch.float32 and friends: plain values
)

// storageClasses maps torch storage class names to dtypes.
var storageClasses = map[string]string{
	"FloatStorage":    "F32",
	"DoubleStorage":   "F64",
	"HalfStorage":     "F16",
	"BFloat16Storage": "BF16",
	"LongStorage":     "I64",
	"IntStorage":      "I32",
	"ShortStorage":    "I16",
	"CharStorage":     "I8",
	"ByteStorage":     "U8",
	"BoolStorage":     "BOOL",
}

// torchDTypes are the dtype objects newer torch may pickle as globals.
var torchDTypes = map[string]bool{
	"float32": true, "float": true, "float64": true, "double": true, "float16": true, "half": true,
	"bfloat16": true, "int64": true, "long": true, "int32": true, "int": true, "int16": true,
	"short": true, "int8": true, "uint8": true, "bool": true,
}

// findGlobal resolves GLOBAL/STACK_GLOBAL through the allowlist.
func findGlobal(module, name string) (*pyGlobal, error) {
	g := &pyGlobal{module: module, name: name}
	switch module + "." + name {
	case "collections.OrderedDict":
		g.kind = gOrderedDict
	case "torch._utils._rebuild_tensor":
		g.kind = gRebuildTensor
	case "torch._utils._rebuild_tensor_v2":
		g.kind = gRebuildTensorV2
	case "torch._utils._rebuild_parameter":
		g.kind = gRebuildParameter
	case "torch._utils._rebuild_parameter_with_state":
		g.kind = gRebuildParameterWithState
	case "torch._tensor._rebuild_from_type_v2":
		g.kind = gRebuildFromTypeV2
	case "torch.Tensor", "torch._tensor.Tensor", "torch.nn.parameter.Parameter", "torch.nn.Parameter":
		g.kind = gTensorType
	case "torch.storage.UntypedStorage", "torch.UntypedStorage",
		"torch.storage._UntypedStorage", "torch._UntypedStorage":
		g.kind, g.dtype = gStorageClass, "U8"
	default:
		if dt, ok := storageClasses[name]; ok && (module == "torch" || module == "torch.cuda") {
			g.kind, g.dtype = gStorageClass, dt
		} else if module == "torch" && torchDTypes[name] {
			g.kind = gDType
		} else {
			return nil, fmt.Errorf("%w %q (only tensor and OrderedDict globals are allowed)", ErrForbiddenGlobal, module+"."+name)
		}
	}
	return g, nil
}

// build implements BUILD (obj.__setstate__(state)) for the objects that can
// carry state in a state dict: an OrderedDict's instance attributes (e.g.
// _metadata) are accepted and ignored.
func build(obj, state any) error {
	switch obj.(type) {
	case *pyDict:
		switch s := state.(type) {
		case nil, *pyDict:
			return nil
		case pyTuple:
			if len(s) == 2 {
				return nil // (dict state, slot state)
			}
		}
		return fmt.Errorf("BUILD of an OrderedDict with %s state is not supported", typeName(state))
	}
	return fmt.Errorf("BUILD on %s is not supported", typeName(obj))
}

// call applies an allowlisted global to its arguments.
func call(fn any, args pyTuple) (any, error) {
	g, ok := fn.(*pyGlobal)
	if !ok {
		return nil, fmt.Errorf("REDUCE of %s, which is not callable", typeName(fn))
	}
	switch g.kind {
	case gOrderedDict:
		d := newDict()
		if len(args) == 0 {
			return d, nil
		}
		var items []any
		switch v := args[0].(type) {
		case *pyList:
			items = v.items
		case pyTuple:
			items = v
		default:
			return nil, fmt.Errorf("collections.OrderedDict called with %s", typeName(args[0]))
		}
		if len(args) != 1 {
			return nil, fmt.Errorf("collections.OrderedDict called with %d arguments", len(args))
		}
		for _, it := range items {
			pair, ok := it.(pyTuple)
			if !ok || len(pair) != 2 {
				return nil, fmt.Errorf("OrderedDict item is %s, not a pair", typeName(it))
			}
			if err := d.set(pair[0], pair[1]); err != nil {
				return nil, err
			}
		}
		return d, nil
	case gRebuildTensor, gRebuildTensorV2:
		return rebuildTensor(g, args)
	case gRebuildParameter, gRebuildParameterWithState:
		want := 3
		if g.kind == gRebuildParameterWithState {
			want = 4
		}
		if len(args) != want {
			return nil, fmt.Errorf("%s.%s takes %d arguments, got %d", g.module, g.name, want, len(args))
		}
		t, ok := args[0].(*pyTensor)
		if !ok {
			return nil, fmt.Errorf("%s.%s: data is %s, not a tensor", g.module, g.name, typeName(args[0]))
		}
		return t, nil
	case gRebuildFromTypeV2:
		// _rebuild_from_type_v2(func, new_type, args, state)
		if len(args) != 4 {
			return nil, fmt.Errorf("torch._tensor._rebuild_from_type_v2 takes 4 arguments, got %d", len(args))
		}
		if nt, ok := args[1].(*pyGlobal); !ok || nt.kind != gTensorType {
			return nil, fmt.Errorf("torch._tensor._rebuild_from_type_v2: new type %s is not torch.Tensor or Parameter", typeName(args[1]))
		}
		inner, ok := args[2].(pyTuple)
		if !ok {
			return nil, fmt.Errorf("torch._tensor._rebuild_from_type_v2: arguments are %s, not a tuple", typeName(args[2]))
		}
		f, ok := args[0].(*pyGlobal)
		if !ok || (f.kind != gRebuildTensor && f.kind != gRebuildTensorV2 && f.kind != gRebuildParameter && f.kind != gRebuildParameterWithState) {
			return nil, fmt.Errorf("torch._tensor._rebuild_from_type_v2: function %s is not a tensor rebuild function", typeName(args[0]))
		}
		return call(f, inner)
	}
	return nil, fmt.Errorf("global %q cannot be called", g.module+"."+g.name)
}

// rebuildTensor implements _rebuild_tensor(storage, storage_offset, size,
// stride) and _rebuild_tensor_v2(storage, storage_offset, size, stride,
// requires_grad, backward_hooks[, metadata]). Bounds are checked when the
// tensor is given a name.
func rebuildTensor(g *pyGlobal, args pyTuple) (any, error) {
	fname := g.module + "." + g.name
	if g.kind == gRebuildTensor && len(args) != 4 || g.kind == gRebuildTensorV2 && len(args) != 6 && len(args) != 7 {
		return nil, fmt.Errorf("%s: wrong number of arguments (%d)", fname, len(args))
	}
	st, ok := args[0].(*pyStorage)
	if !ok {
		return nil, fmt.Errorf("%s: storage is %s, not a storage", fname, typeName(args[0]))
	}
	offset, ok := args[1].(int64)
	if !ok {
		return nil, fmt.Errorf("%s: storage_offset is %s, not an int", fname, typeName(args[1]))
	}
	shape, err := intTuple(args[2])
	if err != nil {
		return nil, fmt.Errorf("%s: size: %v", fname, err)
	}
	stride, err := intTuple(args[3])
	if err != nil {
		return nil, fmt.Errorf("%s: stride: %v", fname, err)
	}
	if len(shape) != len(stride) {
		return nil, fmt.Errorf("%s: size has %d dimensions but stride has %d", fname, len(shape), len(stride))
	}
	if len(shape) > maxTensorDims {
		return nil, fmt.Errorf("%s: %d dimensions (at most %d)", fname, len(shape), maxTensorDims)
	}
	if g.kind == gRebuildTensorV2 {
		if _, ok := args[4].(bool); !ok {
			return nil, fmt.Errorf("%s: requires_grad is %s, not a bool", fname, typeName(args[4]))
		}
	}
	return &pyTensor{storage: st, offset: offset, shape: shape, stride: stride}, nil
}

// intTuple converts a tuple (or list) of ints.
func intTuple(v any) ([]int64, error) {
	var items []any
	switch t := v.(type) {
	case pyTuple:
		items = t
	case *pyList:
		items = t.items
	default:
		return nil, fmt.Errorf("%s, not a tuple", typeName(v))
	}
	if len(items) > maxTensorDims {
		return nil, fmt.Errorf("%d dimensions (at most %d)", len(items), maxTensorDims)
	}
	out := make([]int64, len(items))
	for i, it := range items {
		n, ok := it.(int64)
		if !ok {
			return nil, fmt.Errorf("element %d is %s, not an int", i, typeName(it))
		}
		out[i] = n
	}
	return out, nil
}
