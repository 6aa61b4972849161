"""Containers of modules and parameters: Sequential, ModuleList, ModuleDict, ParameterList,
ParameterDict, as torch.nn's."""
from __future__ import annotations

from collections import OrderedDict

from ...errors import IndexOutOfRange
from ..parameter import Parameter
from .module import Module


class ModuleList(Module):
    """A list of submodules named '0', '1', ... (so state_dict keys read 'layers.0.weight')."""
    _reg = "_modules"  # the registry the list reads (ParameterList: _parameters)

    def __init__(self, modules=None):
        super().__init__()
        self.extend(modules or [])

    def _index(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexOutOfRange(f"{type(self).__name__} index {i} out of range for length {n}")
        return str(i % n)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return type(self)(list(self)[i])
        return self.__dict__[self._reg][self._index(i)]

    def __setitem__(self, i, module):
        self._put(self._index(i), module)

    def __len__(self):
        return len(self.__dict__[self._reg])

    def __iter__(self):
        return iter(self.__dict__[self._reg].values())

    def append(self, module):
        """Add a module at the end; returns self, as torch's."""
        self._put(str(len(self)), module)
        return self

    _put = Module.add_module

    def extend(self, modules):
        """Append each module of an iterable; returns self, as torch's."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module):
        """Insert a module before index (the later ones are renamed), as torch's."""
        items = list(self)
        items.insert(index, module)
        self.__dict__[self._reg].clear()
        self.extend(items)


class Sequential(ModuleList):
    """Submodules applied in order; also accepts an OrderedDict of named modules."""

    def __init__(self, *modules):
        Module.__init__(self)
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            self.extend(modules)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Sequential(*list(self._modules.values())[i])
        return list(self._modules.values())[int(self._index(i))]

    def forward(self, x):
        """x through each submodule in order."""
        for m in self:
            x = m(x)
        return x


class ModuleDict(Module):
    """An ordered dict of submodules (keys are their state-dict names)."""
    _reg = "_modules"  # the registry the dict reads (ParameterDict: _parameters)

    def __init__(self, modules=None):
        super().__init__()
        self.update(modules or {})

    def __getitem__(self, name):
        return self.__dict__[self._reg][name]

    def __setitem__(self, name, module):
        self.add_module(name, module)

    def __delitem__(self, name):
        del self.__dict__[self._reg][name]

    def __len__(self):
        return len(self.__dict__[self._reg])

    def __iter__(self):
        return iter(self.__dict__[self._reg])

    def __contains__(self, name):
        return name in self.__dict__[self._reg]

    def keys(self):
        """The names, as a dict's."""
        return self.__dict__[self._reg].keys()

    def values(self):
        """The modules, as a dict's."""
        return self.__dict__[self._reg].values()

    def items(self):
        """(name, module) pairs, as a dict's."""
        return self.__dict__[self._reg].items()

    def update(self, items):
        """Add or replace modules from a mapping or (name, module) pairs, as torch's."""
        for k, v in (items.items() if hasattr(items, "items") else items):
            self[k] = v

    def pop(self, key):
        """Remove the module of key and return it, as torch's."""
        return self.__dict__[self._reg].pop(key)


class ParameterList(ModuleList):
    """A list of Parameters named '0', '1', ... (plain tensors are wrapped as Parameters).

    >>> import tensorlite as tl
    >>> ps = tl.nn.ParameterList([tl.nn.Parameter(tl.zeros(2)), tl.ones(3)])
    >>> list(ps.state_dict()), len(ps), ps[1].requires_grad
    (['0', '1'], 2, True)
    """
    _reg = "_parameters"

    def __init__(self, values=None):
        super().__init__(values)

    def _put(self, name, value):
        self.register_parameter(name, value if isinstance(value, Parameter) or value is None else Parameter(value))


class ParameterDict(ModuleDict):
    """A dict of Parameters, keyed by name (plain tensors are wrapped as Parameters).

    >>> import tensorlite as tl
    >>> pd = tl.nn.ParameterDict({"scale": tl.ones(2)})
    >>> pd["shift"] = tl.zeros(2)
    >>> list(pd.keys()), "scale" in pd
    (['scale', 'shift'], True)
    """
    _reg = "_parameters"
    __setitem__ = ParameterList._put

    def __init__(self, parameters=None):
        super().__init__(parameters)
